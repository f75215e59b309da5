// Package shards tests operator shards (--watch-label-selector): two
// operators against one control plane, each reconciling the Stacks of its
// shard label, and a Stack handed from one to the other in the middle of an
// update with exactly one update applied.
package shards
