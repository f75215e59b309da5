package agent

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// Caps on what a program's output costs the agent and what one message of its
// API carries. A program or `pulumi install` may print anything — hundreds of
// megabytes without a newline (a progress bar redrawn with '\r'), a stack
// output of any size — and the agent must neither hold it all nor send it in
// one gRPC message: gRPC refuses a message over 4 MiB by default (the
// operator's client keeps that default), and the refused message ends the
// WatchOperation stream or fails GetOperation, for ever for that run.
// docs/operator.md lists them for operators.
const (
	// maxLineBytes caps a line of output (engine output streamed as log
	// events, `pulumi install` output logged): the rest of a longer line is
	// dropped and the line ends with lineCutMark.
	maxLineBytes = 64 << 10
	// lineLookahead is how far past the cap a line is read before it is
	// cut, so that a secret value straddling the cut (one up to this long)
	// is seen whole and the cut moved before it; a longer one has its start
	// masked before the mark's ellipsis (internal/redact).
	lineLookahead = 16 << 10

	// maxEventText caps the text of one log or step event (a log line is
	// already under maxLineBytes, twice that after redaction; a step names a
	// URN, whose resource name a program chooses).
	maxEventText = 256 << 10
	// maxEventBytes caps one message of WatchOperation, and the operation
	// that GetOperation, StartOperation and CancelOperation answer with, well
	// under gRPC's 4 MiB: an operation's outputs and changed resources are
	// cut to fit (capOperation).
	maxEventBytes = 3 << 20

	// maxBufferedEvents and maxBufferedEventBytes bound the events a run
	// keeps for late watchers (its newest; the run keeps at least its last
	// one). With at most DefaultMaxFinishedRuns finished runs kept, the
	// agent holds at most about 50 MiB of them.
	maxBufferedEvents     = 2000
	maxBufferedEventBytes = 1 << 20
)

// lineCutMark ends a line cut at maxLineBytes. It starts with an ellipsis,
// which the redaction reads as the sign of a cut value (internal/redact).
var lineCutMark = fmt.Sprintf("… [line cut at %d bytes]", maxLineBytes)

// capEventText cuts the log or step text of ev to maxEventText and makes it
// valid UTF-8 (a program may print any bytes; protobuf refuses to send a
// string that is not UTF-8, which would end the stream). The text of a log
// event is redacted already, and a prefix of a redacted text holds no secret
// value: cutting it reveals nothing.
func capEventText(ev *agentv1.OperationEvent) {
	switch e := ev.GetEvent().(type) {
	case *agentv1.OperationEvent_Log:
		e.Log = cutText(strings.ToValidUTF8(e.Log, "\uFFFD"), maxEventText)
	case *agentv1.OperationEvent_Step:
		e.Step = cutText(strings.ToValidUTF8(e.Step, "\uFFFD"), maxEventText)
	}
}

// cutText is s cut to at most n bytes (on a UTF-8 boundary) and marked, or
// s when it fits.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("… [cut at %d bytes]", n)
}

// minChangedResources are the changed resources an operation keeps before
// its outputs are left out: the operator shows the first 100 in its Update's
// status.
const minChangedResources = 100

// capOperation makes op's text valid UTF-8 (as capEventText) and cuts op to
// at most limit bytes (its size in the protocol): it leaves out stack
// outputs, the largest first, then changed resources from the end of the
// list, and says so in notices, passed through redact (they name outputs);
// the outputs left out are named (the operator writes the others, and its
// Update's message carries the notices). An operation within the limit keeps
// all. Redact op's message and notices before: redaction may lengthen them.
func capOperation(op *agentv1.Operation, limit int, redact func(string) string) {
	op.Message = strings.ToValidUTF8(op.Message, "\uFFFD")
	for i, n := range op.Notices {
		op.Notices[i] = strings.ToValidUTF8(n, "\uFFFD")
	}
	for i, c := range op.ChangedResources {
		op.ChangedResources[i] = strings.ToValidUTF8(c, "\uFFFD")
	}
	for k, v := range op.Outputs {
		if v == nil {
			continue
		}
		if !utf8.ValidString(k) {
			delete(op.Outputs, k)
			op.Outputs[strings.ToValidUTF8(k, "\uFFFD")] = v
		}
		v.ValueJson = strings.ToValidUTF8(v.GetValueJson(), "\uFFFD")
	}
	if proto.Size(op) <= limit {
		return
	}
	// The notices added below take at most this much.
	budget := limit - 8<<10
	type output struct {
		name string
		size int
	}
	var outputs []output
	for k, v := range op.GetOutputs() {
		outputs = append(outputs, output{k, outputEntrySize(k, v)})
	}
	slices.SortFunc(outputs, func(a, b output) int {
		return cmp.Or(cmp.Compare(b.size, a.size), strings.Compare(a.name, b.name))
	})
	resources := len(op.GetChangedResources())
	// Outputs are what other programs read: they are left out only when the
	// operation is over the limit with no more changed resources than the
	// operator shows; the changed resources then fill what room is left.
	all := op.ChangedResources
	op.ChangedResources = all[:min(resources, minChangedResources)]
	var left []string
	size := proto.Size(op)
	for _, o := range outputs {
		if size <= budget {
			break
		}
		delete(op.Outputs, o.name)
		size -= o.size
		left = append(left, o.name)
	}
	op.ChangedResources = all
	cutChangedResources(op, budget)
	if len(left) > 0 {
		names := left
		if len(names) > 10 {
			names = names[:10]
		}
		for i, name := range names {
			names[i] = cutText(name, 100)
		}
		more := ""
		if len(left) > len(names) {
			more = fmt.Sprintf(" and %d more", len(left)-len(names))
		}
		op.Notices = append(op.Notices, redact(fmt.Sprintf("%d stack output(s) not reported, too large for the agent's %d-byte result: output %s%s (read them with pulumi stack output)",
			len(left), limit, strings.Join(names, ", output "), more)))
	}
	if kept := len(op.GetChangedResources()); kept < resources {
		op.Notices = append(op.Notices, fmt.Sprintf("%d of %d changed resources listed, for the agent's %d-byte result", kept, resources, limit))
	}
}

// outputEntrySize is the size of an entry of Operation.outputs in the
// protocol.
func outputEntrySize(k string, v *agentv1.Output) int {
	entry := protowire.SizeTag(1) + protowire.SizeBytes(len(k)) + protowire.SizeTag(2) + protowire.SizeBytes(proto.Size(v))
	return protowire.SizeTag(10) + protowire.SizeBytes(entry)
}

// cutChangedResources drops op's changed resources from the end of the list
// until op is at most budget bytes.
func cutChangedResources(op *agentv1.Operation, budget int) {
	over := proto.Size(op) - budget
	n := len(op.ChangedResources)
	for n > 0 && over > 0 {
		n--
		over -= protowire.SizeTag(13) + protowire.SizeBytes(len(op.ChangedResources[n]))
	}
	op.ChangedResources = op.ChangedResources[:n]
}
