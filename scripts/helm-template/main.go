// helm-template renders a Helm chart the way `helm template` does, for CI machines that have no
// helm binary (none is packaged for Debian or npm). It implements what Turnpike's chart uses:
// Chart.yaml and values.yaml, values from -f files and --set/--set-string, Helm's coalescing
// (later sources win, maps merge, a null removes a default), templates/*.yaml and NOTES.txt
// rendered with text/template, sprig's functions (without env and expandenv, as in Helm) and
// Helm's own (include, tpl, toYaml, fromYaml, toJson, fromJson, required, fail, lookup), and the
// objects .Values, .Release, .Chart, .Capabilities and .Template. Numbers read from YAML files
// are float64, as Helm reads them (through JSON), so a template that compares a value with an
// integer literal fails here as it would under Helm.
//
// It does not validate values against values.schema.json (the test does, with ajv); with
// --values-json it writes the merged values for that.
//
// Build (no network; Debian's golang-go, golang-github-masterminds-sprig-dev and
// golang-gopkg-yaml.v3-dev): GO111MODULE=off GOPATH=/usr/share/gocode go build -o helm-template .
// scripts/helm-template.sh builds it into a cache outside the checkout and runs it.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

type renderOptions struct {
	chartDir    string
	releaseName string
	namespace   string
	valueFiles  []string
	sets        []string
	setStrings  []string
	kubeVersion string
	apiVersions []string
	isUpgrade   bool
	showNotes   bool
	valuesJSON  string
}

func main() {
	options, err := parseArgs(os.Args[1:])
	if err == nil {
		err = run(options)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error: "+err.Error())
		os.Exit(1)
	}
}

const usage = `usage: helm-template [RELEASE] CHART [-n NAMESPACE] [-f values.yaml]... [--set k=v]... [--set-string k=v]...
                     [--kube-version v1.36.0] [--api-versions group/version]... [--is-upgrade] [--notes] [--values-json FILE]`

func parseArgs(args []string) (renderOptions, error) {
	options := renderOptions{releaseName: "release-name", namespace: "default", kubeVersion: "v1.36.0"}
	// --flag=value is --flag value.
	var expanded []string
	for _, arg := range args {
		if name, value, found := strings.Cut(arg, "="); found && strings.HasPrefix(arg, "--") {
			expanded = append(expanded, name, value)
		} else {
			expanded = append(expanded, arg)
		}
	}
	args = expanded
	var positional []string
	for index := 0; index < len(args); index++ {
		arg := args[index]
		next := func() (string, error) {
			if index+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value\n%s", arg, usage)
			}
			index++
			return args[index], nil
		}
		var err error
		var value string
		switch arg {
		case "-n", "--namespace":
			value, err = next()
			options.namespace = value
		case "-f", "--values":
			value, err = next()
			options.valueFiles = append(options.valueFiles, value)
		case "--set":
			value, err = next()
			options.sets = append(options.sets, value)
		case "--set-string":
			value, err = next()
			options.setStrings = append(options.setStrings, value)
		case "--kube-version":
			value, err = next()
			options.kubeVersion = value
		case "-a", "--api-versions":
			value, err = next()
			options.apiVersions = append(options.apiVersions, value)
		case "--is-upgrade":
			options.isUpgrade = true
		case "--notes":
			options.showNotes = true
		case "--values-json":
			value, err = next()
			options.valuesJSON = value
		case "-h", "--help":
			fmt.Println(usage)
			os.Exit(0)
		default:
			if strings.HasPrefix(arg, "-") {
				return options, fmt.Errorf("unknown flag %s\n%s", arg, usage)
			}
			positional = append(positional, arg)
		}
		if err != nil {
			return options, err
		}
	}
	switch len(positional) {
	case 1:
		options.chartDir = positional[0]
	case 2:
		options.releaseName, options.chartDir = positional[0], positional[1]
	default:
		return options, errors.New(usage)
	}
	return options, nil
}

// readYAMLFile reads a YAML mapping with numbers as float64, as Helm's sigs.k8s.io/yaml does.
func readYAMLFile(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var parsed any
	if err := yaml.Unmarshal(data, &parsed); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if parsed == nil {
		return map[string]any{}, nil
	}
	mapping, ok := asJSONValue(parsed).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a mapping", path)
	}
	return mapping, nil
}

// asJSONValue turns what yaml.v3 decoded into what a JSON round trip gives: float64 numbers,
// string keys.
func asJSONValue(value any) any {
	switch typed := value.(type) {
	case map[string]any:
		for key, item := range typed {
			typed[key] = asJSONValue(item)
		}
		return typed
	case map[any]any:
		converted := map[string]any{}
		for key, item := range typed {
			converted[fmt.Sprint(key)] = asJSONValue(item)
		}
		return converted
	case []any:
		for index, item := range typed {
			typed[index] = asJSONValue(item)
		}
		return typed
	case int:
		return float64(typed)
	case int64:
		return float64(typed)
	case uint64:
		return float64(typed)
	default:
		return value
	}
}

// coalesce merges override onto base as Helm does: maps merge key by key, anything else is
// replaced, and a null in override removes the key.
func coalesce(base, override map[string]any) map[string]any {
	result := map[string]any{}
	for key, value := range base {
		result[key] = value
	}
	for key, value := range override {
		if value == nil {
			delete(result, key)
			continue
		}
		overrideMap, overrideIsMap := value.(map[string]any)
		baseMap, baseIsMap := result[key].(map[string]any)
		if overrideIsMap && baseIsMap {
			result[key] = coalesce(baseMap, overrideMap)
		} else {
			result[key] = value
		}
	}
	return result
}

// applySet applies one --set (or --set-string) argument: comma-separated key.path[index]=value
// pairs; `\,` is a literal comma. --set values are typed as Helm types them (int64, bool, null).
func applySet(values map[string]any, argument string, asString bool) error {
	var pairs []string
	var current strings.Builder
	for index := 0; index < len(argument); index++ {
		if argument[index] == '\\' && index+1 < len(argument) {
			current.WriteByte(argument[index+1])
			index++
			continue
		}
		if argument[index] == ',' {
			pairs = append(pairs, current.String())
			current.Reset()
			continue
		}
		current.WriteByte(argument[index])
	}
	pairs = append(pairs, current.String())
	for _, pair := range pairs {
		key, raw, found := strings.Cut(pair, "=")
		if !found {
			return fmt.Errorf("--set %q: key has no value", pair)
		}
		var value any = raw
		if !asString {
			value = typedSetValue(raw)
		}
		if err := setPath(values, strings.Split(key, "."), value); err != nil {
			return fmt.Errorf("--set %q: %w", pair, err)
		}
	}
	return nil
}

func typedSetValue(raw string) any {
	switch raw {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if number, err := strconv.ParseInt(raw, 10, 64); err == nil && (raw == "0" || !strings.HasPrefix(raw, "0")) {
		return number
	}
	return raw
}

func setPath(node map[string]any, path []string, value any) error {
	segment := path[0]
	name, indexText, isList := strings.Cut(segment, "[")
	if isList {
		index, err := strconv.Atoi(strings.TrimSuffix(indexText, "]"))
		if err != nil || index < 0 {
			return fmt.Errorf("bad index in %q", segment)
		}
		list, _ := node[name].([]any)
		for len(list) <= index {
			list = append(list, nil)
		}
		if len(path) == 1 {
			list[index] = value
		} else {
			child, ok := list[index].(map[string]any)
			if !ok {
				child = map[string]any{}
			}
			if err := setPath(child, path[1:], value); err != nil {
				return err
			}
			list[index] = child
		}
		node[name] = list
		return nil
	}
	if len(path) == 1 {
		if value == nil {
			delete(node, segment)
		} else {
			node[segment] = value
		}
		return nil
	}
	child, ok := node[segment].(map[string]any)
	if !ok {
		child = map[string]any{}
		node[segment] = child
	}
	return setPath(child, path[1:], value)
}

// kubeVersion is .Capabilities.KubeVersion.
type kubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (version kubeVersion) String() string { return version.Version }

// versionSet is .Capabilities.APIVersions.
type versionSet []string

// Has says whether the cluster serves an API version ("apps/v1") or a kind of one ("apps/v1/Deployment").
func (set versionSet) Has(apiVersion string) bool {
	for _, known := range set {
		if known == apiVersion {
			return true
		}
	}
	return false
}

// builtinAPIVersions are the API versions a v1.25+ cluster serves that a chart may ask about.
var builtinAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "policy/v1", "autoscaling/v1", "autoscaling/v2", "networking.k8s.io/v1",
	"rbac.authorization.k8s.io/v1", "storage.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1",
	"scheduling.k8s.io/v1", "node.k8s.io/v1", "apiextensions.k8s.io/v1", "admissionregistration.k8s.io/v1",
}

type capabilities struct {
	KubeVersion kubeVersion
	APIVersions versionSet
	HelmVersion map[string]string
}

func toYAML(value any) string {
	var buffer bytes.Buffer
	encoder := yaml.NewEncoder(&buffer)
	encoder.SetIndent(2)
	if err := encoder.Encode(value); err != nil {
		return ""
	}
	_ = encoder.Close()
	return strings.TrimSuffix(buffer.String(), "\n")
}

func fromYAML(text string) map[string]any {
	var parsed any
	if err := yaml.Unmarshal([]byte(text), &parsed); err != nil {
		return map[string]any{"Error": err.Error()}
	}
	if mapping, ok := asJSONValue(parsed).(map[string]any); ok {
		return mapping
	}
	return map[string]any{}
}

// funcMap is sprig's text functions and Helm's own; `include` and `tpl` need the parsed templates.
func funcMap(templates **template.Template) template.FuncMap {
	functions := sprig.TxtFuncMap()
	delete(functions, "env")
	delete(functions, "expandenv")
	includeDepth := 0
	functions["include"] = func(name string, data any) (string, error) {
		includeDepth++
		defer func() { includeDepth-- }()
		if includeDepth > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		var buffer bytes.Buffer
		if err := (*templates).ExecuteTemplate(&buffer, name, data); err != nil {
			return "", err
		}
		return buffer.String(), nil
	}
	functions["tpl"] = func(text string, data any) (string, error) {
		clone, err := (*templates).Clone()
		if err != nil {
			return "", err
		}
		parsed, err := clone.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", text, err)
		}
		var buffer bytes.Buffer
		if err := parsed.Execute(&buffer, data); err != nil {
			return "", fmt.Errorf("error calling tpl: %w", err)
		}
		return strings.ReplaceAll(buffer.String(), "<no value>", ""), nil
	}
	functions["toYaml"] = toYAML
	functions["fromYaml"] = fromYAML
	functions["fromYamlArray"] = func(text string) []any {
		var parsed []any
		if err := yaml.Unmarshal([]byte(text), &parsed); err != nil {
			return []any{err.Error()}
		}
		return asJSONValue(parsed).([]any)
	}
	functions["toJson"] = func(value any) string {
		data, err := json.Marshal(value)
		if err != nil {
			return ""
		}
		return string(data)
	}
	functions["fromJson"] = func(text string) map[string]any {
		result := map[string]any{}
		if err := json.Unmarshal([]byte(text), &result); err != nil {
			result["Error"] = err.Error()
		}
		return result
	}
	functions["required"] = func(message string, value any) (any, error) {
		if value == nil {
			return value, errors.New(message)
		}
		if text, ok := value.(string); ok && text == "" {
			return value, errors.New(message)
		}
		return value, nil
	}
	functions["fail"] = func(message string) (string, error) { return "", errors.New(message) }
	functions["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]any, error) {
		return map[string]any{}, nil
	}
	return functions
}

func run(options renderOptions) error {
	chart, err := readYAMLFile(filepath.Join(options.chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	chartName, _ := chart["name"].(string)
	if chartName == "" {
		return errors.New("Chart.yaml has no name")
	}
	version := strings.TrimPrefix(options.kubeVersion, "v")
	parsedVersion, err := semver.NewVersion(version)
	if err != nil {
		return fmt.Errorf("--kube-version %q: %w", options.kubeVersion, err)
	}
	if constraintText, ok := chart["kubeVersion"].(string); ok && constraintText != "" {
		constraint, err := semver.NewConstraint(constraintText)
		if err != nil {
			return fmt.Errorf("Chart.yaml kubeVersion %q: %w", constraintText, err)
		}
		if !constraint.Check(parsedVersion) {
			return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes v%s", constraintText, version)
		}
	}

	values := map[string]any{}
	if defaults, err := readYAMLFile(filepath.Join(options.chartDir, "values.yaml")); err == nil {
		values = defaults
	} else if !os.IsNotExist(errors.Unwrap(err)) && !os.IsNotExist(err) {
		return err
	}
	for _, file := range options.valueFiles {
		overrides, err := readYAMLFile(file)
		if err != nil {
			return err
		}
		values = coalesce(values, overrides)
	}
	setValues := map[string]any{}
	for _, argument := range options.sets {
		if err := applySet(setValues, argument, false); err != nil {
			return err
		}
	}
	for _, argument := range options.setStrings {
		if err := applySet(setValues, argument, true); err != nil {
			return err
		}
	}
	values = coalesce(values, setValues)
	if options.valuesJSON != "" {
		data, err := json.MarshalIndent(values, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(options.valuesJSON, data, 0o644); err != nil {
			return err
		}
	}

	chartObject := map[string]any{}
	for key, value := range chart {
		if key == "" {
			continue
		}
		chartObject[strings.ToUpper(key[:1])+key[1:]] = value
	}
	release := map[string]any{
		"Name": options.releaseName, "Namespace": options.namespace, "IsInstall": !options.isUpgrade, "IsUpgrade": options.isUpgrade,
		"Revision": 1, "Service": "Helm",
	}
	if options.isUpgrade {
		release["Revision"] = 2
	}
	caps := capabilities{
		KubeVersion: kubeVersion{
			Version: "v" + parsedVersion.String(), Major: strconv.FormatUint(parsedVersion.Major(), 10),
			Minor: strconv.FormatUint(parsedVersion.Minor(), 10), GitVersion: "v" + parsedVersion.String(),
		},
		APIVersions: append(append(versionSet{}, builtinAPIVersions...), options.apiVersions...),
		HelmVersion: map[string]string{"Version": "v3-compatible (scripts/helm-template)"},
	}

	templateDir := filepath.Join(options.chartDir, "templates")
	entries, err := os.ReadDir(templateDir)
	if err != nil {
		return err
	}
	var templates *template.Template
	root := template.New(chartName).Funcs(funcMap(&templates)).Option("missingkey=zero")
	var rendered []string
	for _, entry := range entries {
		if entry.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(templateDir, entry.Name()))
		if err != nil {
			return err
		}
		name := chartName + "/templates/" + entry.Name()
		if _, err := root.New(name).Parse(string(data)); err != nil {
			return fmt.Errorf("parse error in %s", strings.TrimPrefix(err.Error(), "template: "))
		}
		if !strings.HasPrefix(entry.Name(), "_") {
			rendered = append(rendered, name)
		}
	}
	templates = root
	sort.Strings(rendered)

	var output strings.Builder
	var notes string
	for _, name := range rendered {
		base := strings.TrimSuffix(name, filepath.Base(name))
		context := map[string]any{
			"Values": values, "Release": release, "Chart": chartObject, "Capabilities": caps,
			"Template": map[string]any{"Name": name, "BasePath": strings.TrimSuffix(base, "/")},
			"Files":    map[string]any{},
		}
		var buffer bytes.Buffer
		if err := templates.ExecuteTemplate(&buffer, name, context); err != nil {
			return errors.New(cleanExecutionError(err))
		}
		text := strings.ReplaceAll(buffer.String(), "<no value>", "")
		if strings.HasSuffix(name, "NOTES.txt") {
			notes = text
			continue
		}
		if !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml") {
			continue
		}
		for _, document := range splitDocuments(text) {
			output.WriteString("---\n# Source: " + name + "\n" + document + "\n")
		}
	}
	if options.showNotes && notes != "" {
		output.WriteString("\nNOTES:\n" + notes + "\n")
	}
	_, err = os.Stdout.WriteString(output.String())
	return err
}

// splitDocuments splits a rendered file at its `---` lines and drops the documents that hold
// nothing but blank lines and comments, as Helm does.
func splitDocuments(text string) []string {
	var documents []string
	var current []string
	flush := func() {
		body := strings.Trim(strings.Join(current, "\n"), "\n")
		meaningful := false
		for _, line := range strings.Split(body, "\n") {
			trimmed := strings.TrimSpace(line)
			if trimmed != "" && !strings.HasPrefix(trimmed, "#") {
				meaningful = true
				break
			}
		}
		if meaningful {
			documents = append(documents, body)
		}
		current = nil
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.TrimRight(line, " ") == "---" {
			flush()
			continue
		}
		current = append(current, line)
	}
	flush()
	return documents
}

// cleanExecutionError shortens text/template's error for a `fail` or `required` as Helm does:
// "execution error at (chart/templates/file.yaml:3:4): message".
func cleanExecutionError(err error) string {
	message := err.Error()
	const marker = "error calling "
	if position := strings.LastIndex(message, marker); position >= 0 {
		location := strings.TrimPrefix(message, "template: ")
		if colon := strings.Index(location, ": "); colon >= 0 {
			location = location[:colon]
		}
		rest := message[position+len(marker):]
		if colon := strings.Index(rest, ": "); colon >= 0 {
			rest = rest[colon+2:]
		}
		return fmt.Sprintf("execution error at (%s): %s", location, rest)
	}
	return message
}
