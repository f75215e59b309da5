package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

func TestRenderTable(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	got := RenderTable([]Row{
		{Stage: "dev", Stack: "infra/web-dev", Commit: "1234567", State: "Ready", Health: "Healthy Synced", LastUpdate: "up succeeded web-dev-2", Since: now.Add(-75 * time.Second)},
		{Stage: "prod", Stack: "infra/web-prod", State: "Reconciling (PrerequisiteNotSatisfied)"},
	}, now)
	want := "" +
		"STAGE  STACK           COMMIT   STACK STATE                             ARGO CD         LAST UPDATE             ELAPSED\n" +
		"dev    infra/web-dev   1234567  Ready                                   Healthy Synced  up succeeded web-dev-2  1m15s\n" +
		"prod   infra/web-prod  -        Reconciling (PrerequisiteNotSatisfied)  -               -                       -\n"
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestStackColumns(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	cond := func(typ, status, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionStatus(status), Reason: reason, LastTransitionTime: at}
	}
	good, bad := strings.Repeat("a", 40), strings.Repeat("b", 40)
	tests := []struct {
		name                      string
		status                    pulumiv1.StackStatus
		commit, state, lastUpdate string
	}{
		{name: "no status", state: "waiting for the operator"},
		{name: "ready", status: pulumiv1.StackStatus{
			Conditions: []metav1.Condition{cond("Ready", "True", "ProcessingCompleted")},
			LastUpdate: &pulumiv1.StackUpdateState{Name: "u1", Type: "up", State: "succeeded", LastAttemptedCommit: good, LastSuccessfulCommit: good},
		}, commit: "aaaaaaa", state: "Ready", lastUpdate: "up succeeded u1"},
		{name: "stalled after trying another commit", status: pulumiv1.StackStatus{
			Conditions: []metav1.Condition{cond("Ready", "False", "UpdateFailed"), cond("Stalled", "True", "UpdateFailed")},
			LastUpdate: &pulumiv1.StackUpdateState{Name: "u7", Type: "up", State: "failed", LastAttemptedCommit: bad, LastSuccessfulCommit: good},
		}, commit: "aaaaaaa (tried bbbbbbb)", state: "Stalled (UpdateFailed)", lastUpdate: "up failed u7"},
		{name: "a preview Stack shows the commit it previewed", status: pulumiv1.StackStatus{
			Conditions: []metav1.Condition{cond("Ready", "True", "ProcessingCompleted")},
			LastUpdate: &pulumiv1.StackUpdateState{Name: "p3", Type: "preview", State: "succeeded", LastAttemptedCommit: bad},
		}, commit: "bbbbbbb (previewed)", state: "Ready", lastUpdate: "preview succeeded p3"},
		{name: "a failed preview", status: pulumiv1.StackStatus{
			Conditions: []metav1.Condition{cond("Ready", "False", "UpdateFailed"), cond("Stalled", "True", "UpdateFailed")},
			LastUpdate: &pulumiv1.StackUpdateState{Name: "p4", Type: "preview", State: "failed", LastAttemptedCommit: bad},
		}, commit: "(tried bbbbbbb)", state: "Stalled (UpdateFailed)", lastUpdate: "preview failed p4"},
		{name: "reconciling wins over a false Ready", status: pulumiv1.StackStatus{
			Conditions: []metav1.Condition{cond("Ready", "False", "Progressing"), cond("Reconciling", "True", "StackProcessing")},
		}, state: "Reconciling (StackProcessing)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			commit, state, lastUpdate, _ := stackColumns(&pulumiv1.Stack{Status: tt.status})
			if commit != tt.commit || state != tt.state || lastUpdate != tt.lastUpdate {
				t.Errorf("got (%q, %q, %q), want (%q, %q, %q)", commit, state, lastUpdate, tt.commit, tt.state, tt.lastUpdate)
			}
		})
	}
}

// TestScreenNotLive: without a terminal, each changed row is printed once,
// on one line; an unchanged row is not printed again.
func TestScreenNotLive(t *testing.T) {
	var out bytes.Buffer
	s := newScreen(&out, false, time.Now())
	dev := Row{Stage: "dev", Stack: "infra/web-dev", State: "Reconciling (StackProcessing)"}
	s.Update([]Row{dev})
	s.Update([]Row{dev})
	dev.State = "Ready"
	s.Update([]Row{dev})
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Fatalf("printed %d lines, want 2:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "Ready") || strings.Contains(out.String(), "\x1b[") {
		t.Fatalf("output:\n%q", out.String())
	}
}

// TestScreenLive: on a terminal the table is redrawn in place under the
// narration.
func TestScreenLive(t *testing.T) {
	var out bytes.Buffer
	s := newScreen(&out, true, time.Now())
	s.Update([]Row{{Stage: "dev"}})
	s.Say("hello")
	// header + one row drawn, erased (cursor up 2) before the narration, drawn again.
	if got := out.String(); !strings.Contains(got, "\x1b[2A\x1b[J[0s] hello\nSTAGE") {
		t.Fatalf("output:\n%q", got)
	}
}

func TestApprove(t *testing.T) {
	for answer, want := range map[string]bool{"y\n": true, "YES\n": true, "n\n": false, "\n": false, "": false} {
		var out bytes.Buffer
		d := &demo{o: Options{In: strings.NewReader(answer), Out: &out}, scr: newScreen(&out, false, time.Now())}
		got, err := d.approve(context.Background(), stage{Name: "prod"}, strings.Repeat("c", 40))
		if err != nil || got != want {
			t.Errorf("answer %q: approve = %v, %v; want %v", answer, got, err, want)
		}
		if !strings.Contains(out.String(), "Promote ccccccc to prod?") {
			t.Errorf("the question is missing: %q", out.String())
		}
	}
}

// TestScreenAsk: while a question waits, row changes are not drawn; the
// next narration resumes drawing.
func TestScreenAsk(t *testing.T) {
	var out bytes.Buffer
	s := newScreen(&out, true, time.Now())
	s.Update([]Row{{Stage: "dev", State: "Ready"}})
	s.Ask("Promote? ")
	asked := out.Len()
	s.Update([]Row{{Stage: "dev", State: "Reconciling"}})
	if out.Len() != asked {
		t.Fatalf("drew while asking: %q", out.String()[asked:])
	}
	s.Say("promoting")
	if !strings.Contains(out.String()[asked:], "Reconciling") {
		t.Fatalf("the table was not drawn again after the answer: %q", out.String()[asked:])
	}
}
