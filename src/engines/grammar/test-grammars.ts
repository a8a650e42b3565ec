/** For tests: custom tools' grammars as clients send them. */

/** Codex's apply_patch tool grammar, as Codex sends it. */
export const APPLY_PATCH = String.raw`start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
`;

/**
 * Codex's apply_patch grammar bounded (at most two hunks of two lines of 20 characters), so a
 * tiny model cannot write on forever: the grammar itself ends every call. stories260K, which
 * almost never writes the two characters of a JSON-escaped newline by itself, ends the
 * unbounded grammar's lines only at the token limit.
 */
export const BOUNDED_APPLY_PATCH = String.raw`start: begin_patch hunk ~ 1..2 end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk
add_hunk: "*** Add File: " filename LF add_line ~ 1..2
delete_hunk: "*** Delete File: " filename LF

filename: /[a-z_]{1,12}\.txt/
add_line: "+" /[^\n]{0,20}/ LF

%import common.LF
`;
