package kubeauth

import "github.com/prometheus/client_golang/prometheus"

var (
	descHits = prometheus.NewDesc("stackflow_analysis_auth_cache_hits_total",
		"Answers served from the auth cache.", []string{"cache"}, nil)
	descMisses = prometheus.NewDesc("stackflow_analysis_auth_cache_misses_total",
		"Auth cache lookups that found no live entry.", []string{"cache"}, nil)
	descEvictions = prometheus.NewDesc("stackflow_analysis_auth_cache_evictions_total",
		"Auth cache entries evicted (least recently used) to stay within the bound.", []string{"cache"}, nil)
	descRefreshes = prometheus.NewDesc("stackflow_analysis_auth_cache_refreshes_total",
		"Reviews started in the background by a hit on an entry due for refresh (refresh ahead): nobody waited.", []string{"cache"}, nil)
	descEntries = prometheus.NewDesc("stackflow_analysis_auth_cache_entries",
		"Entries held in the auth cache.", []string{"cache"}, nil)
	descReviews = prometheus.NewDesc("stackflow_analysis_auth_reviews_total",
		"TokenReviews (cache=token) and SubjectAccessReviews (cache=access) sent, by result.",
		[]string{"cache", "result"}, nil)
)

// Describe implements prometheus.Collector: the Authorizer exports
// stackflow_analysis_auth_cache_{hits,misses,evictions,refreshes}_total{cache="token|access"},
// stackflow_analysis_auth_cache_entries{cache} and
// stackflow_analysis_auth_reviews_total{cache, result="allowed|denied|error"}.
func (a *Authorizer) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHits, descMisses, descEvictions, descRefreshes, descEntries, descReviews} {
		ch <- d
	}
}

// Collect implements prometheus.Collector from Stats.
func (a *Authorizer) Collect(ch chan<- prometheus.Metric) {
	s := a.Stats()
	for _, c := range []struct {
		name string
		s    CacheStats
	}{{"token", s.Token}, {"access", s.Access}} {
		ch <- prometheus.MustNewConstMetric(descHits, prometheus.CounterValue, float64(c.s.Hits), c.name)
		ch <- prometheus.MustNewConstMetric(descMisses, prometheus.CounterValue, float64(c.s.Misses), c.name)
		ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(c.s.Evictions), c.name)
		ch <- prometheus.MustNewConstMetric(descRefreshes, prometheus.CounterValue, float64(c.s.Refreshes), c.name)
		ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(c.s.Entries), c.name)
		ch <- prometheus.MustNewConstMetric(descReviews, prometheus.CounterValue, float64(c.s.Allowed), c.name, "allowed")
		ch <- prometheus.MustNewConstMetric(descReviews, prometheus.CounterValue, float64(c.s.Denied), c.name, "denied")
		ch <- prometheus.MustNewConstMetric(descReviews, prometheus.CounterValue, float64(c.s.Errors), c.name, "error")
	}
}
