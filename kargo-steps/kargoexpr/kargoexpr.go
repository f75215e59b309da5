// Package kargoexpr is a small evaluator of Kargo v1.11's expression
// templating, for fast tests: it evaluates the `${{ }}` (and `${% %}`) spans of
// promotion step configs, vars and `if` conditions as Kargo's controller does,
// with github.com/expr-lang/expr, in an environment shaped like Kargo's.
//
// Why it is kept now that the real Kargo runs in the tests
// (operator/test/kargoe2e runs examples/kargo with Stackflow's tasks on Kargo
// v1.11.2, end to end): that run takes minutes and covers the paths a working
// pipeline takes. This package lets kargo-steps/config check in milliseconds
// what it does not: the Stage snippets of kargo-steps/config/stages and the
// namespaced PromotionTasks, which are not promoted for real; a commit that
// reads as a number; the Argo CD sync skipped after a failed step; a missing
// var; the http step's expressions against every answer of the analysis
// service (401, 403, 5xx, a non-JSON body), which a working pipeline never
// sees. The evaluation of the promotions the real Kargo now runs (the
// example's Stages, their verification args) was deleted from examples/, and
// so was what no shipped file uses (warehouse(), configMap(), unsafeQuote,
// asJSON, asYAML, always(), failure(), status(), ctx.meta). kargoe2e checks the
// evaluator against the real Kargo: the commit message and pull request title
// it computes for the shipped tasks are the ones Kargo wrote.
//
// What it models (behaviour read from Kargo's source at tag v1.11.2; no
// Kargo code is used):
//
//   - Templates: a string value without a delimiter is returned unchanged (so
//     "42" stays a string). Otherwise every span is evaluated; a string result
//     is written as is, any other result (nil, bool, number, map, list, struct)
//     as JSON. The concatenated text, after one trailing newline is dropped, is
//     then typed: enclosed in double quotes → the string between them (that is
//     what quote() relies on); else a float64 if it parses as one; else a bool;
//     else any valid JSON value; else the text. So a value that is exactly one
//     expression keeps the result's type, and an embedded one becomes text, but
//     a text that happens to look like a number (an all-digit SHA) becomes a
//     number: use quote() for values that must stay strings.
//   - Walk: maps and lists are walked; only string values are templates, keys
//     are never evaluated.
//   - Environment: vars, ctx{project, stage, promotion, targetFreight{name,
//     alias}}, outputs, task.outputs (only for a step whose alias is
//     "<task>::<step>": the outputs of the same task with that prefix
//     stripped).
//   - Functions: commitFrom(repoURL) (the freight's commit for that
//     repository, nil when absent), secret(name) (the Secret's data, an empty
//     map when missing), quote(), and in `if` conditions success().
//   - Vars: task defaults, the Promotion's vars and the task reference's vars
//     combined as Kargo inflates a task (an empty value is no value), then
//     evaluated in order.
//   - The http step's own expressions (HTTPEnv, EvalPlain): plain expr over
//     response{status, header(name), headers, body}, body decoded as Kargo's
//     step does.
//   - The yaml-parse step (YAMLParse): the file decoded with sigs.k8s.io/yaml
//     (the version Kargo uses, which reads the first document only), each
//     output a plain expr expression over the decoded document.
//   - expr-lang's own builtins (now(), duration(), string(), matches, …),
//     which Kargo leaves enabled: now() is the evaluating process's clock.
//
// Not modelled: how commitFrom finds the origin when several Warehouses
// subscribe to the repository (this evaluator takes the first Freight commit
// of the repository, comparing URLs up to case, a trailing slash and ".git");
// the Secret lookup against the API server (Secrets are given as maps); the
// Promotion's output bookkeeping (outputs are given as maps); the
// response-body size cap and the YAML parse mode of the http step.
package kargoexpr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	"sigs.k8s.io/yaml"
)

// Commit is a Git commit of a piece of Freight, with the fields Kargo's
// commitFrom() result exposes.
type Commit struct {
	RepoURL   string `json:"repoURL,omitempty"`
	ID        string `json:"id,omitempty"`
	Branch    string `json:"branch,omitempty"`
	Tag       string `json:"tag,omitempty"`
	Message   string `json:"message,omitempty"`
	Author    string `json:"author,omitempty"`
	Committer string `json:"committer,omitempty"`
}

// FreightRef is ctx.targetFreight.
type FreightRef struct {
	Name  string
	Alias string
}

// StepStatus is the execution status of an earlier step, for success() and
// a step without `if`. Status is one of Kargo's step statuses: Succeeded,
// Failed, Errored, Skipped, Running, Aborted.
type StepStatus struct {
	Alias  string
	Status string
	// ContinueOnError steps do not count as failures.
	ContinueOnError bool
}

// Var is a name/value pair, like Kargo's ExpressionVariable.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// Env is the context a step's expressions are evaluated in.
type Env struct {
	Project       string
	Stage         string
	Promotion     string
	TargetFreight FreightRef
	// StepAlias is the alias of the step being evaluated ("<task>::<step>"
	// for a step inflated from a task).
	StepAlias string
	// Vars are the evaluated vars of the step.
	Vars map[string]any
	// Outputs are the outputs of earlier steps, by (full) alias.
	Outputs map[string]any
	// Commits are the commits of the Freight being promoted.
	Commits []Commit
	// Secrets are the data of the Secrets in the project namespace, by name.
	Secrets map[string]map[string]string
	// Steps are the statuses of the steps run so far.
	Steps []StepStatus
}

// AliasSeparator separates a task step's alias from its task's alias.
const AliasSeparator = "::"

func taskNamespace(alias string) string {
	parts := strings.Split(alias, AliasSeparator)
	if len(parts) != 2 {
		return ""
	}
	return parts[0]
}

// Map returns the expression environment.
func (e *Env) Map() map[string]any {
	outputs := map[string]any{}
	for k, v := range e.Outputs {
		outputs[k] = v
	}
	vars := e.Vars
	if vars == nil {
		vars = map[string]any{}
	}
	env := map[string]any{
		"ctx": map[string]any{
			"project":       e.Project,
			"promotion":     e.Promotion,
			"stage":         e.Stage,
			"targetFreight": map[string]any{"name": e.TargetFreight.Name, "alias": e.TargetFreight.Alias},
		},
		"vars":    vars,
		"outputs": outputs,
	}
	if ns := taskNamespace(e.StepAlias); ns != "" {
		task := map[string]any{}
		for k, v := range e.Outputs {
			if taskNamespace(k) == ns {
				task[k[len(ns)+len(AliasSeparator):]] = v
			}
		}
		env["task"] = map[string]any{"outputs": task}
	}
	return env
}

func (e *Env) hasFailures() bool {
	for _, s := range e.Steps {
		if !s.ContinueOnError && (s.Status == "Failed" || s.Status == "Errored") {
			return true
		}
	}
	return false
}

func (e *Env) options(status bool) []expr.Option {
	opts := []expr.Option{
		expr.Function("commitFrom", func(a ...any) (any, error) {
			url, ok := a[0].(string)
			if !ok {
				return nil, fmt.Errorf("commitFrom(): first argument must be string, got %T", a[0])
			}
			for i := range e.Commits {
				if c := e.Commits[i]; normalizeURL(c.RepoURL) == normalizeURL(url) {
					return &c, nil
				}
			}
			return (*Commit)(nil), nil
		}, new(func(string) *Commit)),
		expr.Function("secret", func(a ...any) (any, error) {
			return lookup(e.Secrets, a)
		}, new(func(string) map[string]string)),
		expr.Function("quote", quote, new(func(any) string)),
	}
	if status {
		opts = append(opts,
			expr.Function("success", func(...any) (any, error) { return !e.hasFailures(), nil }, new(func() bool)),
		)
	}
	return opts
}

// normalizeURL compares repository URLs loosely, as Kargo does (case, a
// trailing slash or ".git" do not matter).
func normalizeURL(u string) string {
	u = strings.ToLower(strings.TrimSpace(u))
	u = strings.TrimSuffix(u, "/")
	return strings.TrimSuffix(u, ".git")
}

func lookup(m map[string]map[string]string, a []any) (any, error) {
	name, ok := a[0].(string)
	if !ok {
		return nil, fmt.Errorf("argument must be string, got %T", a[0])
	}
	out := map[string]string{}
	for k, v := range m[name] {
		out[k] = v
	}
	return out, nil
}

// quote makes a value a string: a string is quoted, anything else is
// written as JSON between quotes.
func quote(a ...any) (any, error) {
	if s, ok := a[0].(string); ok {
		return strconv.Quote(s), nil
	}
	b, err := json.Marshal(a[0])
	if err != nil {
		return nil, fmt.Errorf("quote(): %w", err)
	}
	return "\"" + string(b) + "\"", nil
}

var delimiters = [][2]string{{"${{", "}}"}, {"${%", "%}"}}

// next splits template at its first expression.
func next(template string) (before, expression, after string, found bool, err error) {
	start, which := -1, 0
	for i, d := range delimiters {
		if j := strings.Index(template, d[0]); j >= 0 && (start < 0 || j < start) {
			start, which = j, i
		}
	}
	if start < 0 {
		return "", "", template, false, nil
	}
	d := delimiters[which]
	rest := template[start+len(d[0]):]
	end := strings.Index(rest, d[1])
	if end < 0 {
		return "", "", "", false, fmt.Errorf("unclosed expression: expected %q but reached end of template", d[1])
	}
	return template[:start], rest[:end], rest[end+len(d[1]):], true, nil
}

// Template evaluates one template string (a config value, a var, an `if`).
func (e *Env) Template(template string) (any, error) {
	return e.template(template, true)
}

func (e *Env) template(template string, status bool) (any, error) {
	has := false
	for _, d := range delimiters {
		if strings.Contains(template, d[0]) {
			has = true
		}
	}
	if !has {
		return template, nil
	}
	env := e.Map()
	opts := e.options(status)
	var b strings.Builder
	for rest := template; ; {
		before, expression, after, found, err := next(rest)
		if err != nil {
			return nil, err
		}
		b.WriteString(before)
		if !found {
			b.WriteString(after)
			break
		}
		program, err := expr.Compile(expression, opts...)
		if err != nil {
			return nil, fmt.Errorf("compile %q: %w", expression, err)
		}
		v, err := expr.Run(program, env)
		if err != nil {
			return nil, fmt.Errorf("evaluate %q: %w", expression, err)
		}
		if s, ok := v.(string); ok {
			b.WriteString(s)
		} else {
			j, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("evaluate %q: %w", expression, err)
			}
			b.Write(j)
		}
		rest = after
	}
	return typed(b.String()), nil
}

// typed gives the evaluated text of a template its type, as Kargo does.
func typed(s string) any {
	trimmed := strings.TrimSuffix(s, "\n")
	newline := trimmed != s
	if len(trimmed) > 1 && strings.HasPrefix(trimmed, `"`) && strings.HasSuffix(trimmed, `"`) {
		out := trimmed[1 : len(trimmed)-1]
		if newline {
			out += "\n"
		}
		return out
	}
	if f, err := strconv.ParseFloat(trimmed, 64); err == nil {
		return f
	}
	if b, err := strconv.ParseBool(trimmed); err == nil {
		return b
	}
	var v any
	if err := json.Unmarshal([]byte(trimmed), &v); err == nil {
		return v
	}
	return s
}

// Evaluate walks a JSON-like value (maps, lists, scalars) and returns a copy
// with every string value evaluated as a template. Keys are not evaluated.
func (e *Env) Evaluate(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			ev, err := e.Evaluate(val)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = ev
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			ev, err := e.Evaluate(val)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = ev
		}
		return out, nil
	case string:
		return e.Template(t)
	default:
		return v, nil
	}
}

// If evaluates a step's `if` condition; it must give a bool. An empty
// condition is true unless an earlier step failed or errored (Kargo skips a
// step without `if` after a failure).
func (e *Env) If(condition string) (bool, error) {
	if condition == "" {
		return !e.hasFailures(), nil
	}
	v, err := e.Template(condition)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("expression must evaluate to a boolean, got %T", v)
	}
	return b, nil
}

// ResolveTaskVars combines a task's var defaults with the Promotion's vars
// and the task reference's vars into the vars of each inflated step, as Kargo
// does when it inflates a (Cluster)PromotionTask: a default is dropped when
// the Promotion sets the var (the Promotion's vars are evaluated for every
// step anyway); a var with neither a default nor a value on the Promotion or
// the reference fails ("missing value for variable"). An empty value counts as
// no value.
func ResolveTaskVars(taskVars, promoVars, refVars []Var) ([]Var, error) {
	set := func(vs []Var) map[string]bool {
		m := map[string]bool{}
		for _, v := range vs {
			if v.Value != "" {
				m[v.Name] = true
			}
		}
		return m
	}
	inPromo, inRef := set(promoVars), set(refVars)
	var out []Var
	for _, v := range taskVars {
		if inPromo[v.Name] {
			continue
		}
		if v.Value != "" {
			out = append(out, v)
			continue
		}
		if !inRef[v.Name] {
			return nil, fmt.Errorf("missing value for variable %q", v.Name)
		}
	}
	return append(out, refVars...), nil
}

// EvaluateVars evaluates the Promotion's vars, then the step's vars (later
// ones may refer to earlier ones through `vars`), into e.Vars, as Kargo does
// before it evaluates a step. The Promotion's vars do not see outputs.
func (e *Env) EvaluateVars(promoVars, stepVars []Var) error {
	vars := map[string]any{}
	noOutputs := *e
	noOutputs.Outputs, noOutputs.StepAlias, noOutputs.Steps = nil, "", nil
	for _, v := range promoVars {
		noOutputs.Vars = vars
		val, err := noOutputs.template(v.Value, false)
		if err != nil {
			return fmt.Errorf("promotion variable %q: %w", v.Name, err)
		}
		vars[v.Name] = val
	}
	for _, v := range stepVars {
		e.Vars = vars
		val, err := e.template(v.Value, false)
		if err != nil {
			return fmt.Errorf("variable %q: %w", v.Name, err)
		}
		vars[v.Name] = val
	}
	e.Vars = vars
	return nil
}

// HTTPEnv is the environment of the http step's successExpression,
// failureExpression, errorExpression and outputs, built from a response the
// way Kargo's http step builds it: status (int64), header(name), headers, and
// body: {} when empty; decoded JSON for application/json (an error when it is
// not JSON) and for unknown content types when it is valid JSON (else {});
// the text for text/plain. contentType overrides the response's Content-Type
// (the step's responseContentType). YAML bodies are not modelled.
func HTTPEnv(status int, header http.Header, body []byte, contentType string) (map[string]any, error) {
	if header == nil {
		header = http.Header{}
	}
	response := map[string]any{
		"status":  int64(status),
		"header":  header.Get,
		"headers": header,
		"body":    map[string]any{},
	}
	if contentType == "" {
		contentType = header.Get("Content-Type")
		if i := strings.Index(contentType, ";"); i >= 0 {
			contentType = contentType[:i]
		}
		contentType = strings.TrimSpace(strings.ToLower(contentType))
	}
	if len(body) > 0 {
		switch {
		case strings.EqualFold(contentType, "text/plain"):
			response["body"] = string(body)
		case strings.EqualFold(contentType, "application/json") || json.Valid(body):
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				return nil, fmt.Errorf("failed to parse JSON response: %w", err)
			}
			response["body"] = v
		}
	}
	return map[string]any{"response": response}, nil
}

// EvalPlain evaluates a plain expr expression (no delimiters, no Kargo
// functions), as the http step does with its own expressions.
func EvalPlain(expression string, env map[string]any) (any, error) {
	program, err := expr.Compile(expression)
	if err != nil {
		return nil, err
	}
	return expr.Run(program, env)
}

// YAMLParse does what Kargo's yaml-parse step does with a file's bytes and
// its outputs (name → fromExpression): it decodes the file with
// sigs.k8s.io/yaml (the first document only) and evaluates each expression,
// compiled without options, over the decoded document. An empty file, a file
// that does not parse, or an expression that fails is an error, which fails
// the step.
func YAMLParse(data []byte, outputs map[string]string) (map[string]any, error) {
	if len(data) == 0 {
		return nil, errors.New("could not parse empty YAML file")
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("could not parse YAML file: %w", err)
	}
	out := make(map[string]any, len(outputs))
	for name, expression := range outputs {
		program, err := expr.Compile(expression)
		if err != nil {
			return nil, fmt.Errorf("error compiling expression %q: %w", expression, err)
		}
		v, err := expr.Run(program, doc)
		if err != nil {
			return nil, fmt.Errorf("failed to extract outputs: error evaluating expression %q: %w", expression, err)
		}
		out[name] = v
	}
	return out, nil
}
