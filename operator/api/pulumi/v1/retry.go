package v1

import "time"

// The retry schedule of failed updates. It is part of the API: the operator
// retries by it, and the analysis service tells from it when a failed update
// runs again, without asking the operator.
const (
	// RetryFirstDelay is the delay before the first retry of a failed update;
	// it doubles per further consecutive failure.
	RetryFirstDelay = 10 * time.Second
	// RetryDefaultMaxBackoff caps the delay when
	// spec.retryMaxBackoffDurationSeconds is not set.
	RetryDefaultMaxBackoff = time.Hour
	// RetryStallAfter is how many consecutive failures show the Stack as
	// Stalled (UpdateFailed); it is still retried, at the cap.
	RetryStallAfter = 5
)

// RetryBackoff is the delay before the retry that follows the given number of
// consecutive failures: RetryFirstDelay doubled per failure after the first,
// capped at max.
func RetryBackoff(failures int64, max time.Duration) time.Duration {
	d := RetryFirstDelay
	for i := int64(1); i < failures && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// RetryMaxBackoff is the Stack's cap on the retry delay.
func (s *Stack) RetryMaxBackoff() time.Duration {
	if s.Spec.RetryMaxBackoffDurationSeconds > 0 {
		return time.Duration(s.Spec.RetryMaxBackoffDurationSeconds) * time.Second
	}
	return RetryDefaultMaxBackoff
}

// NextRetryTime is when the operator runs the failed last update again (at
// the cap once it has failed RetryStallAfter times); false when the last
// update did not fail.
func (s *Stack) NextRetryTime() (time.Time, bool) {
	lu := s.Status.LastUpdate
	if lu == nil || lu.State != FailedStackStateMessage {
		return time.Time{}, false
	}
	wait := RetryBackoff(lu.Failures, s.RetryMaxBackoff())
	if lu.Failures >= RetryStallAfter {
		wait = s.RetryMaxBackoff()
	}
	return lu.LastResyncTime.Add(wait), true
}
