package preview

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/stackflow-io/stackflow/github-action/result"
	"github.com/stackflow-io/stackflow/internal/redact"
)

// SecretMask replaces secret values in Output and Error.
const SecretMask = redact.Mask

// ConfigValue is one configuration value.
type ConfigValue struct {
	// Value is the value: a string, or (with JSON) the JSON text of a typed
	// value.
	Value string
	// Secret stores the value encrypted and masks it in the result.
	Secret bool
	// JSON says Value is JSON text: a JSON string is set as that string,
	// any other JSON value (number, boolean, object, array, null) keeps its
	// type, as the operator's spec.config does.
	JSON bool
}

// Request is one stack to preview.
type Request struct {
	// Key identifies the result (result.Result.Key); empty means
	// "<project>/<stack>", or the stack name when fully qualified
	// ("org/project/stack").
	Key string
	// WorkDir is the project directory (holding Pulumi.yaml).
	WorkDir string
	// Stack is the stack name, "stack" or fully qualified
	// "org/project/stack".
	Stack string
	// Config is set on the stack before the preview, keyed by configuration
	// key ("aws:region", "app:settings"); keys are never property paths.
	Config map[string]ConfigValue
	// Env adds (or overrides) environment variables of the pulumi process.
	Env map[string]string
	// Backend, when set, is the state backend URL for this stack (a Stack's
	// spec.backend), overriding PULUMI_BACKEND_URL.
	Backend string
	// SecretsProvider is used when the stack must be created for the
	// preview ("" for the backend's default: passphrase on self-managed
	// backends, Pulumi Cloud's own on Pulumi Cloud).
	SecretsProvider string
	// Refresh refreshes the state before the preview.
	Refresh bool
	// Source says, for a person, what is previewed (result.Result.Source).
	Source string
	// Notes are copied to the result, before any the preview adds.
	Notes []string
	// Masks are more values to mask (as secret configuration values are).
	Masks []string
	// Skip runs nothing: the result is Skipped, with the Notes.
	Skip bool
	// Err, when set, runs nothing: the result is Failed with this error (a
	// planner's failure to prepare the request).
	Err error
	// Project names the project in a result that runs nothing (Skip, Err);
	// otherwise read from Pulumi.yaml.
	Project string
}

// Options configure Run.
type Options struct {
	// PulumiCommand is the pulumi CLI; nil means the one found on PATH.
	PulumiCommand auto.PulumiCommand
	// Mask receives every secret value before any preview starts (the
	// action prints "::add-mask::"): each value, and each line of a
	// multi-line value.
	Mask func(string)
	// Env is added to every request's environment (Request.Env wins).
	Env map[string]string
	// NoDiff leaves out the property-level diff (pulumi preview --diff)
	// from the Output, which otherwise shows each changed property's old
	// and new values (secrets as [secret]).
	NoDiff bool
	// Timeout bounds each request's preview, from selecting the stack to
	// the end of `pulumi preview` (the preview-timeout input; 0: none). A
	// preview still running then is stopped (the CLI is interrupted, then
	// killed) and its result is Failed, saying so; the others go on.
	Timeout time.Duration
}

// Run previews each request with the pulumi CLI on PATH; see Options.Run.
func Run(ctx context.Context, reqs []Request, parallel int) []result.Result {
	return Options{}.Run(ctx, reqs, parallel)
}

// Run previews each request, at most parallel at once (parallel < 1 means
// one at a time), and returns the results in request order.
func (o Options) Run(ctx context.Context, reqs []Request, parallel int) []result.Result {
	if parallel < 1 {
		parallel = 1
	}
	masks := make([]redact.Values, len(reqs))
	for i, r := range reqs {
		masks[i] = r.secrets()
		if o.Mask != nil {
			for _, s := range masks[i].List() {
				o.Mask(s)
			}
		}
	}
	var cliErr error
	if o.PulumiCommand == nil && slices.ContainsFunc(reqs, func(r Request) bool { return !r.Skip && r.Err == nil }) {
		// Look the CLI up once (it runs pulumi version), not per request.
		o.PulumiCommand, cliErr = auto.NewPulumiCommand(nil)
	}
	// Requests for the same stack of the same project directory share its
	// settings file (Pulumi.<stack>.yaml): they run one after the other.
	locks := map[[2]string]*sync.Mutex{}
	for _, r := range reqs {
		k := [2]string{filepath.Clean(r.WorkDir), r.Stack}
		if locks[k] == nil {
			locks[k] = &sync.Mutex{}
		}
	}
	out := make([]result.Result, len(reqs))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i] = failed(reqs[i], ctx.Err(), masks[i])
				return
			}
			defer func() { <-sem }()
			r := reqs[i]
			l := locks[[2]string{filepath.Clean(r.WorkDir), r.Stack}]
			l.Lock()
			defer l.Unlock()
			if cliErr != nil && !r.Skip && r.Err == nil {
				r.Err = fmt.Errorf("pulumi CLI: %w", cliErr)
			}
			out[i] = o.one(ctx, r, masks[i])
		}()
	}
	wg.Wait()
	return out
}

// secrets are the values to mask (internal/redact's rule: each value and
// each line of a multi-line one, at least redact.MinLength long): secret
// config values, as given and as a string when JSON, and Masks.
func (r Request) secrets() redact.Values {
	var values []string
	for _, c := range r.Config {
		if !c.Secret {
			continue
		}
		values = append(values, c.Value)
		if c.JSON {
			var s string
			if json.Unmarshal([]byte(c.Value), &s) == nil {
				values = append(values, s)
			}
		}
	}
	return redact.NewValues(append(values, r.Masks...)...)
}

func base(r Request) result.Result {
	return result.Result{Key: r.Key, Project: r.Project, Stack: r.Stack, Source: r.Source,
		Notes: append([]string(nil), r.Notes...)}
}

func failed(r Request, err error, secrets redact.Values) result.Result {
	res := base(r)
	res.Status = result.Failed
	res.Error = secrets.Text(err.Error())
	if res.Key == "" {
		res.Key = defaultKey(res.Project, r.Stack)
	}
	return res
}

func (o Options) one(ctx context.Context, r Request, secrets redact.Values) (res result.Result) {
	switch {
	case r.Err != nil:
		return failed(r, r.Err, secrets)
	case r.Skip:
		res = base(r)
		res.Status = result.Skipped
		if res.Key == "" {
			res.Key = defaultKey(res.Project, r.Stack)
		}
		return res
	}
	res = base(r)
	if o.Timeout > 0 {
		parent := ctx
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		defer func() {
			if res.Status != result.Succeeded && parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				res.Status = result.Failed
				res.Error = fmt.Sprintf("the preview did not finish within %s (the preview-timeout input): stopped", o.Timeout)
			}
		}()
	}
	defer func() {
		if res.Key == "" {
			res.Key = defaultKey(res.Project, res.Stack)
		}
		res.Output = secrets.Text(res.Output)
		res.Error = secrets.Text(res.Error)
	}()
	fail := func(err error) result.Result {
		res.Status = result.Failed
		res.Error = err.Error()
		return res
	}

	env := map[string]string{}
	for k, v := range o.Env {
		env[k] = v
	}
	for k, v := range r.Env {
		env[k] = v
	}
	if r.Backend != "" {
		env["PULUMI_BACKEND_URL"] = r.Backend
	}
	if _, ok := env["PULUMI_SKIP_UPDATE_CHECK"]; !ok {
		env["PULUMI_SKIP_UPDATE_CHECK"] = "true"
	}
	wsOpts := []auto.LocalWorkspaceOption{auto.EnvVars(env)}
	if o.PulumiCommand != nil {
		wsOpts = append(wsOpts, auto.Pulumi(o.PulumiCommand))
	}
	if r.SecretsProvider != "" {
		wsOpts = append(wsOpts, auto.SecretsProvider(r.SecretsProvider))
	}
	ws, err := auto.NewLocalWorkspace(ctx, append(wsOpts, auto.WorkDir(r.WorkDir))...)
	if err != nil {
		return fail(fmt.Errorf("workspace %s: %w", r.WorkDir, err))
	}
	if ps, err := ws.ProjectSettings(ctx); err == nil && ps != nil && res.Project == "" {
		res.Project = string(ps.Name)
	}

	stack, err := auto.SelectStack(ctx, r.Stack, ws)
	if err != nil {
		if !auto.IsSelectStack404Error(err) {
			return fail(fmt.Errorf("select stack %s: %w", r.Stack, cleanAutoError(err)))
		}
		stack, err = auto.NewStack(ctx, r.Stack, ws)
		if err != nil {
			return fail(fmt.Errorf("create stack %s for the preview: %w", r.Stack, cleanAutoError(err)))
		}
		res.Notes = append(res.Notes, fmt.Sprintf("Stack %s does not exist in the backend yet: previewed as a new stack (everything is created); the preview does not keep it.", r.Stack))
		defer func() {
			// Remove the stack made for the preview (no resources, so
			// without --force), with a context of its own: the preview's
			// may be canceled.
			rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := ws.RemoveStack(rmCtx, r.Stack); err != nil {
				res.Notes = append(res.Notes, "The stack created for the preview could not be removed: "+secrets.Text(cleanAutoError(err).Error()))
			}
		}()
	}
	if err := setConfig(ctx, stack, r.Config); err != nil {
		return fail(fmt.Errorf("set configuration: %w", err))
	}
	// The stack's own secret values (its settings file's "secure:" values,
	// its environments'), read as the engine will see them, are masked
	// before the preview can print them.
	all, err := stack.GetAllConfig(ctx)
	if err != nil {
		return fail(fmt.Errorf("read the configuration to mask its secrets: %w", cleanAutoError(err)))
	}
	var found []string
	for _, v := range all {
		if v.Secret {
			found = append(found, v.Value)
		}
	}
	known := map[string]bool{}
	for _, s := range secrets.List() {
		known[s] = true
	}
	for _, s := range redact.NewValues(found...).List() {
		if !known[s] && o.Mask != nil {
			o.Mask(s)
		}
	}
	secrets = redact.NewValues(append(secrets.List(), found...)...)

	var stdout bytes.Buffer
	evs := make(chan events.EngineEvent)
	collected := make(chan collector, 1)
	go func() {
		var c collector
		for ev := range evs {
			c.add(ev)
		}
		collected <- c
	}()
	opts := []optpreview.Option{optpreview.ProgressStreams(&stdout), optpreview.EventStreams(evs), optpreview.SuppressProgress()}
	if r.Refresh {
		opts = append(opts, optpreview.Refresh())
	}
	if !o.NoDiff {
		opts = append(opts, optpreview.Diff())
	}
	pr, perr := stack.Preview(ctx, opts...)
	var c collector
	select { // the Automation API closes evs when the event log ends
	case c = <-collected:
	case <-time.After(10 * time.Second):
	}
	res.Output = stdout.String()
	res.Resources = c.resources()
	res.Changes = changes(pr.ChangeSummary)
	if perr != nil {
		res.Status = result.Failed
		if len(c.errors) > 0 {
			res.Error = strings.Join(c.errors, "\n")
		} else {
			res.Error = cleanAutoError(perr).Error()
		}
		if res.Output == "" {
			res.Output = autoStdout(perr)
		}
		return res
	}
	res.Status = result.Succeeded
	return res
}

// setConfig sets all values in one `pulumi config set-all --json`, which
// keeps typed values typed (as the operator's agent does).
func setConfig(ctx context.Context, stack auto.Stack, cfg map[string]ConfigValue) error {
	if len(cfg) == 0 {
		return nil
	}
	type jsonValue struct {
		Value       string `json:"value"`
		ObjectValue any    `json:"objectValue,omitempty"`
		Secret      bool   `json:"secret,omitempty"`
	}
	all := map[string]jsonValue{}
	for k, c := range cfg {
		v := jsonValue{Value: c.Value, Secret: c.Secret}
		if c.JSON {
			var x any
			if err := json.Unmarshal([]byte(c.Value), &x); err != nil {
				// Never quote the value: it may be secret.
				return fmt.Errorf("key %s: value is not valid JSON", k)
			}
			switch x := x.(type) {
			case string:
				v.Value = x
			case nil:
				v.Value = "null"
			default:
				b, _ := json.Marshal(x)
				v.Value, v.ObjectValue = string(b), x
			}
		}
		all[k] = v
	}
	b, err := json.Marshal(all)
	if err != nil {
		return err
	}
	if err := stack.SetAllConfigJson(ctx, string(b), &auto.ConfigOptions{Path: false}); err != nil {
		// The CLI's error never echoes values, but keep only its message.
		return cleanAutoError(err)
	}
	return nil
}

// changes maps the engine's change summary; replacements count once (the
// "replace" entry), their create-replacement and delete-replaced steps not.
func changes(sum map[apitype.OpType]int) result.Changes {
	var c result.Changes
	for op, n := range sum {
		switch string(op) {
		case "create":
			c.Create += n
		case "update":
			c.Update += n
		case "delete":
			c.Delete += n
		case "replace":
			c.Replace += n
		case "same":
			c.Same += n
		}
	}
	return c
}

// collector gathers resource steps and error diagnostics from the engine's
// events.
type collector struct {
	order  []string
	byURN  map[string]result.Resource
	errors []string
}

func (c *collector) add(ev events.EngineEvent) {
	if d := ev.DiagnosticEvent; d != nil && d.Severity == "error" {
		msg := strings.TrimSpace(stripANSI(d.Message))
		if msg != "" {
			if d.URN != "" {
				msg = d.URN + ": " + msg
			}
			c.errors = append(c.errors, msg)
		}
	}
	if ev.ResourcePreEvent == nil {
		return
	}
	m := ev.ResourcePreEvent.Metadata
	op := string(m.Op)
	switch op {
	case "same", "refresh":
		return
	}
	if isDefaultProvider(m.Type, m.URN) {
		return // not a resource of the program (nor counted in the summary)
	}
	if c.byURN == nil {
		c.byURN = map[string]result.Resource{}
	}
	prev, seen := c.byURN[m.URN]
	if !seen {
		c.order = append(c.order, m.URN)
	}
	if seen && prev.Op == "replace" {
		return // the replacement's other steps fold into it
	}
	if seen && op != "replace" {
		return
	}
	c.byURN[m.URN] = result.Resource{Op: op, Type: m.Type, Name: urnName(m.URN), URN: m.URN}
}

func (c *collector) resources() []result.Resource {
	var out []result.Resource
	for _, u := range c.order {
		out = append(out, c.byURN[u])
	}
	return out
}

// isDefaultProvider: the engine's default provider for a package
// (pulumi:providers:<pkg> named "default" or "default_<version>").
func isDefaultProvider(typ, urn string) bool {
	if !strings.HasPrefix(typ, "pulumi:providers:") {
		return false
	}
	n := urnName(urn)
	return n == "default" || strings.HasPrefix(n, "default_")
}

// urnName is a URN's last component, the resource's name
// (urn:pulumi:stack::project::type::name; names may hold "::").
func urnName(urn string) string {
	parts := strings.SplitN(urn, "::", 4)
	if len(parts) == 4 {
		return parts[3]
	}
	return urn
}

// cleanAutoError keeps the CLI's error lines of an Automation API error
// (whose message otherwise holds the command line, stdout and stderr).
func cleanAutoError(err error) error {
	msg := err.Error()
	i := strings.Index(msg, "\nstderr: ")
	if i < 0 {
		return err
	}
	stderr := msg[i+len("\nstderr: "):]
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(stripANSI(l))
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return err
	}
	return errors.New(strings.Join(lines, "\n"))
}

// autoStdout is the stdout an Automation API error carries.
func autoStdout(err error) string {
	msg := err.Error()
	i := strings.Index(msg, "\nstdout: ")
	if i < 0 {
		return ""
	}
	rest := msg[i+len("\nstdout: "):]
	if j := strings.Index(rest, "\nstderr: "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	// The engine's colour markup: <{%reset%}> and friends.
	out := b.String()
	for strings.Contains(out, "<{%") {
		i := strings.Index(out, "<{%")
		j := strings.Index(out[i:], "%}>")
		if j < 0 {
			break
		}
		out = out[:i] + out[i+j+3:]
	}
	return out
}

// defaultKey is "<project>/<stack>"; a fully qualified stack name
// ("org/project/stack") is its own key.
func defaultKey(project, stack string) string {
	if strings.Count(stack, "/") == 2 {
		return stack
	}
	return project + "/" + stack
}
