package agent

import (
	"sort"
	"time"
)

// Defaults of RunRetention: the operator records a run's result seconds after
// it ends (its follower is woken by the end of WatchOperation), and after a
// restart asks GetOperation for every Progressing Update, so an hour covers an
// operator outage of that length; fifty finished runs of one workspace (whose
// stacks run one operation at a time) are far more than ever wait for the
// operator at once.
const (
	DefaultFinishedRunRetention = time.Hour
	DefaultMaxFinishedRuns      = 50
)

// RunRetention bounds the finished runs an agent keeps for GetOperation and
// WatchOperation (each with its buffered events). Running runs are never
// evicted.
type RunRetention struct {
	// Retention is how long a finished run stays findable after it ended.
	Retention time.Duration
	// MaxFinished is the most finished runs kept; beyond it the runs that
	// ended first are dropped first.
	MaxFinished int
}

// withDefaults fills zero fields with the defaults.
func (p RunRetention) withDefaults() RunRetention {
	if p.Retention <= 0 {
		p.Retention = DefaultFinishedRunRetention
	}
	if p.MaxFinished <= 0 {
		p.MaxFinished = DefaultMaxFinishedRuns
	}
	return p
}

// finishedRun is what the eviction decision needs to know of a finished run.
type finishedRun struct {
	id    string
	ended time.Time
}

// evict returns the IDs of the finished runs to drop at now: every run that
// ended more than Retention ago, then, of the rest, the earliest ended beyond
// the newest MaxFinished. Ties in end time are broken by ID, so the decision
// does not depend on map order.
func (p RunRetention) evict(finished []finishedRun, now time.Time) []string {
	sorted := append([]finishedRun(nil), finished...)
	sort.Slice(sorted, func(i, j int) bool {
		if !sorted[i].ended.Equal(sorted[j].ended) {
			return sorted[i].ended.Before(sorted[j].ended)
		}
		return sorted[i].id < sorted[j].id
	})
	var out []string
	keep := sorted[:0]
	for _, f := range sorted {
		if now.Sub(f.ended) > p.Retention {
			out = append(out, f.id)
			continue
		}
		keep = append(keep, f)
	}
	if excess := len(keep) - p.MaxFinished; excess > 0 {
		for _, f := range keep[:excess] {
			out = append(out, f.id)
		}
	}
	return out
}

// pruneRuns drops the finished runs the retention policy no longer keeps.
// Callers must not hold s.mu.
func (s *Server) pruneRuns() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var finished []finishedRun
	for id, r := range s.runs {
		select {
		case <-r.done:
		default:
			continue // running: never evicted
		}
		r.mu.Lock()
		ended := time.Unix(0, r.op.EndTimeUnixNano)
		r.mu.Unlock()
		finished = append(finished, finishedRun{id: id, ended: ended})
	}
	evicted := s.retention.evict(finished, now)
	for _, id := range evicted {
		delete(s.runs, id)
	}
	if len(evicted) > 0 {
		s.log.V(1).Info("Evicted finished runs", "evicted", len(evicted), "kept", len(s.runs))
	}
}
