// Package fleet tests what running many Stacks needs: operator shards
// (--watch-label-selector) — two operators against one control plane, each
// reconciling the Stacks of its shard label, and a Stack handed from one to
// the other in the middle of an update with exactly one update applied —
// and idle Workspaces removed and created again on the next operation.
package fleet
