package server

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackflow_analysis_requests_total",
			Help: "API requests by verification phase (empty for errors and non-verification routes) and HTTP status code.",
		}, []string{"phase", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stackflow_analysis_request_duration_seconds",
			Help:    "Time to answer an API request, by route (verification, stack, pulumi-verification, other); long polls included.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 10, 25},
		}, []string{"route"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}
