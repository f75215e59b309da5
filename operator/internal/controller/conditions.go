package controller

import (
	"unicode/utf8"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stackflow-io/stackflow/internal/redact"
)

// conditioned is an API object whose status holds conditions (Stack,
// Workspace and Update implement it; a Program has none).
type conditioned interface {
	client.Object
	GetConditions() *[]metav1.Condition
}

// setCondition sets one of o's conditions for o's current generation,
// keeping its transition time when the status does not change. It is where
// every condition message of every kind is written, and so where messages
// are made fit for a status (conditionMessage).
func setCondition(o conditioned, typ string, status metav1.ConditionStatus, reason, message string) {
	apimeta.SetStatusCondition(o.GetConditions(), metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: conditionMessage(message), ObservedGeneration: o.GetGeneration(),
	})
}

// maxConditionMessage bounds a condition's message (the API allows 32,768
// bytes): a remote's error text has no bound of its own.
const maxConditionMessage = 4096

// conditionMessage is msg as a status may carry it: the user info of every
// URL in it masked (a Stack's projectRepo may hold a token, and go-git and
// net/http repeat URLs in their errors), at most maxConditionMessage bytes.
// Events repeat the Ready condition's message, so they get the same.
func conditionMessage(msg string) string {
	msg = redact.URLCredentials(msg)
	if len(msg) > maxConditionMessage {
		cut := maxConditionMessage - len("…")
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
}

// removeCondition removes one of o's conditions.
func removeCondition(o conditioned, typ string) {
	apimeta.RemoveStatusCondition(o.GetConditions(), typ)
}

// Condition types every kstatus kind shares (PKO's names).
const (
	readyCondition       = "Ready"
	reconcilingCondition = "Reconciling"
	stalledCondition     = "Stalled"
)

// kstatusConditions is how a kind spells the three kstatus states: Ready
// always present; Reconciling (when the kind has it) and Stalled only while
// true. The markers are the one way a controller writes them.
type kstatusConditions struct {
	// reconciling is whether the kind has a Reconciling condition: a Stack
	// does; a Workspace says it progresses on Ready (False) alone.
	reconciling bool
	// inProgressReason and stalledReason are Ready's reason while
	// reconciling or stalled, the step's own reason going on Reconciling or
	// Stalled (a Stack's NotReadyInProgress and NotReadyStalled); empty, the
	// step's reason is Ready's too (a Workspace).
	inProgressReason, stalledReason string
}

// markReady: the object is as its spec asks.
func (k kstatusConditions) markReady(o conditioned, reason, msg string) {
	removeCondition(o, reconcilingCondition)
	removeCondition(o, stalledCondition)
	setCondition(o, readyCondition, metav1.ConditionTrue, reason, msg)
}

// markReconciling: the controller works toward Ready.
func (k kstatusConditions) markReconciling(o conditioned, reason, msg string) {
	removeCondition(o, stalledCondition)
	setCondition(o, readyCondition, metav1.ConditionFalse, or(k.inProgressReason, reason), msg)
	if k.reconciling {
		setCondition(o, reconcilingCondition, metav1.ConditionTrue, reason, msg)
	}
}

// markStalled: the object cannot progress until someone acts.
func (k kstatusConditions) markStalled(o conditioned, reason, msg string) {
	removeCondition(o, reconcilingCondition)
	setCondition(o, readyCondition, metav1.ConditionFalse, or(k.stalledReason, reason), msg)
	setCondition(o, stalledCondition, metav1.ConditionTrue, reason, msg)
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
