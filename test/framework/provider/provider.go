package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	// Name is the provider's package name.
	Name = "stackflowtest"
	// Version is the plugin version tests install.
	Version = "0.1.0"
	// RecordType is the token of the Record resource.
	RecordType = "stackflowtest:index:Record"
	// DirEnv names the environment variable used when the "dir" config is unset.
	DirEnv = "STACKFLOW_TEST_PROVIDER_DIR"
	// HoldEnv names a file: while it exists, creating, updating or reading
	// (refreshing) a record waits (after any sleepSeconds; a create or update
	// its failOn refuses fails at once instead), so a test decides when an
	// operation holding the stack's lock ends.
	HoldEnv = "STACKFLOW_TEST_PROVIDER_HOLD"

	// unknown is the engine's sentinel for values not known during preview.
	unknown = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
)

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Server implements the Pulumi resource provider protocol for Records.
type Server struct {
	pulumirpc.UnimplementedResourceProviderServer
	dir string
}

// New returns a provider server, not yet configured.
func New() *Server { return &Server{} }

// GetPluginInfo reports the provider version.
func (s *Server) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: Version}, nil
}

// GetSchema returns the package schema Pulumi YAML uses to resolve Record.
func (s *Server) GetSchema(context.Context, *pulumirpc.GetSchemaRequest) (*pulumirpc.GetSchemaResponse, error) {
	return &pulumirpc.GetSchemaResponse{Schema: schema}, nil
}

// CheckConfig accepts the configuration as given.
func (s *Server) CheckConfig(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

// DiffConfig never asks for a provider replacement.
func (s *Server) DiffConfig(context.Context, *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	return &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}, nil
}

// Configure records the directory records live in.
func (s *Server) Configure(_ context.Context, req *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	dir := req.GetVariables()[Name+":config:dir"]
	if args := req.GetArgs(); args != nil {
		if v, ok := args.AsMap()["dir"].(string); ok && v != "" {
			dir = v
		}
	}
	if dir == "" || dir == unknown {
		dir = os.Getenv(DirEnv)
	}
	s.dir = dir
	return &pulumirpc.ConfigureResponse{}, nil
}

// record is a Record's inputs.
type record struct {
	Name         string
	Content      string
	FailOn       string
	SleepSeconds float64
	// Echoed is the "echo" input (any JSON) or, when "echoEnv" names an
	// environment variable, its value (after "echo", when that is a string);
	// nil when neither is set.
	Echoed any
}

func parseRecord(props *structpb.Struct) (record, []*pulumirpc.CheckFailure) {
	m := props.AsMap()
	var r record
	var failures []*pulumirpc.CheckFailure
	str := func(key string) string {
		v, present := m[key]
		if !present || v == nil {
			return ""
		}
		s, ok := v.(string)
		if !ok {
			failures = append(failures, &pulumirpc.CheckFailure{Property: key, Reason: fmt.Sprintf("%s must be a string", key)})
		}
		return s
	}
	r.Name = str("name")
	r.Content = str("content")
	r.FailOn = str("failOn")
	if v, ok := m["echo"]; ok && v != nil && v != unknown {
		r.Echoed = v
	}
	if name := str("echoEnv"); name != "" && name != unknown {
		prefix, _ := r.Echoed.(string)
		r.Echoed = prefix + os.Getenv(name)
	}
	if v, ok := m["sleepSeconds"]; ok && v != nil {
		switch n := v.(type) {
		case float64:
			r.SleepSeconds = n
		case string:
			if n != unknown {
				failures = append(failures, &pulumirpc.CheckFailure{Property: "sleepSeconds", Reason: "sleepSeconds must be a number"})
			}
		}
	}
	if r.Name != "" && r.Name != unknown && !validName.MatchString(r.Name) {
		failures = append(failures, &pulumirpc.CheckFailure{Property: "name", Reason: fmt.Sprintf("name %q must match %s", r.Name, validName)})
	}
	switch r.FailOn {
	case "", "create", "update", "delete", "always", unknown:
	default:
		failures = append(failures, &pulumirpc.CheckFailure{Property: "failOn", Reason: `failOn must be one of "create", "update", "delete", "always"`})
	}
	return r, failures
}

// Check validates a Record's inputs and fills in its name from the URN.
func (s *Server) Check(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	news := req.GetNews()
	r, failures := parseRecord(news)
	if len(failures) > 0 {
		return &pulumirpc.CheckResponse{Failures: failures}, nil
	}
	if r.Name == "" {
		name := req.GetName()
		if prior, ok := req.GetOlds().AsMap()["name"].(string); ok && prior != "" {
			name = prior // keep an auto-named record's name stable
		}
		news.Fields["name"] = structpb.NewStringValue(name)
	}
	return &pulumirpc.CheckResponse{Inputs: news}, nil
}

// Diff replaces a Record whose name changed and updates one whose other inputs
// changed.
func (s *Server) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	olds, news := req.GetOldInputs().AsMap(), req.GetNews().AsMap()
	if len(olds) == 0 {
		olds = req.GetOlds().AsMap()
	}
	var diffs, replaces []string
	detailed := map[string]*pulumirpc.PropertyDiff{}
	for _, key := range []string{"name", "content", "failOn", "sleepSeconds", "echo", "echoEnv"} {
		if fmt.Sprint(olds[key]) == fmt.Sprint(news[key]) {
			continue
		}
		diffs = append(diffs, key)
		kind := pulumirpc.PropertyDiff_UPDATE
		if key == "name" {
			replaces = append(replaces, key)
			kind = pulumirpc.PropertyDiff_UPDATE_REPLACE
		}
		detailed[key] = &pulumirpc.PropertyDiff{Kind: kind, InputDiff: true}
	}
	changes := pulumirpc.DiffResponse_DIFF_NONE
	if len(diffs) > 0 {
		changes = pulumirpc.DiffResponse_DIFF_SOME
	}
	return &pulumirpc.DiffResponse{
		Changes: changes, Diffs: diffs, Replaces: replaces,
		DetailedDiff: detailed, HasDetailedDiff: true, DeleteBeforeReplace: true,
	}, nil
}

// Create writes the record's file.
func (s *Server) Create(ctx context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	r, failures := parseRecord(req.GetProperties())
	if len(failures) > 0 {
		return nil, status.Error(codes.InvalidArgument, failures[0].Reason)
	}
	if req.GetPreview() {
		return &pulumirpc.CreateResponse{Properties: s.outputs(req.GetProperties(), r.Name)}, nil
	}
	if err := s.apply(ctx, r, "create"); err != nil {
		return nil, err
	}
	return &pulumirpc.CreateResponse{Id: r.Name, Properties: s.outputs(req.GetProperties(), r.Name)}, nil
}

// Update rewrites the record's file.
func (s *Server) Update(ctx context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	r, failures := parseRecord(req.GetNews())
	if len(failures) > 0 {
		return nil, status.Error(codes.InvalidArgument, failures[0].Reason)
	}
	if req.GetPreview() {
		return &pulumirpc.UpdateResponse{Properties: s.outputs(req.GetNews(), req.GetId())}, nil
	}
	if err := s.apply(ctx, r, "update"); err != nil {
		return nil, err
	}
	return &pulumirpc.UpdateResponse{Properties: s.outputs(req.GetNews(), req.GetId())}, nil
}

// Read reports the file's current content, so refresh sees out-of-band edits; a
// missing file reads as a deleted resource. It waits while HoldEnv's file
// exists, as create and update do, so a test can hold an update that only
// refreshes.
func (s *Server) Read(ctx context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	if err := waitHold(ctx); err != nil {
		return nil, err
	}
	path, err := s.path(req.GetId())
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &pulumirpc.ReadResponse{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read record %q: %w", req.GetId(), err)
	}
	props := req.GetProperties()
	if props == nil {
		props = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	props.Fields["content"] = structpb.NewStringValue(string(data))
	props.Fields["path"] = structpb.NewStringValue(path)
	inputs := req.GetInputs()
	if inputs != nil {
		inputs.Fields["content"] = structpb.NewStringValue(string(data))
	}
	return &pulumirpc.ReadResponse{Id: req.GetId(), Properties: props, Inputs: inputs}, nil
}

// Delete removes the record's file.
func (s *Server) Delete(_ context.Context, req *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	r, _ := parseRecord(req.GetProperties())
	if r.FailOn == "delete" || r.FailOn == "always" {
		return nil, fmt.Errorf("stackflowtest: record %q: failOn=%s: delete refused", req.GetId(), r.FailOn)
	}
	path, err := s.path(req.GetId())
	if err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("delete record %q: %w", req.GetId(), err)
	}
	return &emptypb.Empty{}, nil
}

// Cancel has nothing to stop: operations watch their own contexts.
func (s *Server) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (s *Server) apply(ctx context.Context, r record, op string) error {
	if r.SleepSeconds > 0 {
		select {
		case <-time.After(time.Duration(r.SleepSeconds * float64(time.Second))):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if r.FailOn == op || r.FailOn == "always" {
		return fmt.Errorf("stackflowtest: record %q: failOn=%s: %s refused%s", r.Name, r.FailOn, op, echoSuffix(r))
	}
	// Held after failOn: an operation set to fail fails at once, so a held
	// test waits only on operations that would succeed.
	if err := waitHold(ctx); err != nil {
		return err
	}
	path, err := s.path(r.Name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("%s record %q: %w", op, r.Name, err)
	}
	if err := os.WriteFile(path, []byte(r.Content), 0o644); err != nil {
		return fmt.Errorf("%s record %q: %w", op, r.Name, err)
	}
	return nil
}

// echoSuffix repeats the echoed value in an error message, as a careless
// provider would.
func echoSuffix(r record) string {
	if r.Echoed == nil {
		return ""
	}
	b, _ := json.Marshal(r.Echoed)
	return "; echoed " + string(b)
}

// waitHold waits while the file HoldEnv names exists (polling every 100 ms),
// or until ctx ends.
func waitHold(ctx context.Context) error {
	hold := os.Getenv(HoldEnv)
	if hold == "" {
		return nil
	}
	for {
		if _, err := os.Stat(hold); err != nil {
			return nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Server) path(id string) (string, error) {
	if s.dir == "" {
		return "", fmt.Errorf("stackflowtest: no directory: set config %s:dir or %s", Name, DirEnv)
	}
	if !validName.MatchString(id) {
		return "", fmt.Errorf("stackflowtest: invalid record id %q", id)
	}
	return filepath.Join(s.dir, id), nil
}

func (s *Server) outputs(inputs *structpb.Struct, id string) *structpb.Struct {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range inputs.GetFields() {
		out.Fields[k] = v
	}
	if r, _ := parseRecord(inputs); r.Echoed != nil {
		if v, err := structpb.NewValue(r.Echoed); err == nil {
			out.Fields["echoed"] = v
		}
	}
	if id != "" && s.dir != "" {
		out.Fields["path"] = structpb.NewStringValue(filepath.Join(s.dir, id))
	} else {
		out.Fields["path"] = structpb.NewStringValue(unknown)
	}
	return out
}

var schema = func() string {
	str := map[string]any{"type": "string"}
	anyType := map[string]any{"$ref": "pulumi.json#/Any"}
	s := map[string]any{
		"name":    Name,
		"version": Version,
		"config": map[string]any{
			"variables": map[string]any{"dir": map[string]any{"type": "string", "description": "Directory holding the records."}},
		},
		"provider": map[string]any{
			"inputProperties": map[string]any{"dir": str},
		},
		"resources": map[string]any{
			RecordType: map[string]any{
				"description": "A file-backed record for tests.",
				"inputProperties": map[string]any{
					"name":         str,
					"content":      str,
					"failOn":       str,
					"sleepSeconds": map[string]any{"type": "number"},
					"echo":         anyType,
					"echoEnv":      str,
				},
				"requiredInputs": []string{"content"},
				"properties": map[string]any{
					"name":         str,
					"content":      str,
					"failOn":       str,
					"sleepSeconds": map[string]any{"type": "number"},
					"path":         str,
					"echo":         anyType,
					"echoEnv":      str,
					"echoed":       anyType,
				},
				"required": []string{"name", "content", "path"},
			},
		},
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}()
