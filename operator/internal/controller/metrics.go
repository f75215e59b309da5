package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	updateDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "stackflow_update_duration_seconds",
		Help:    "Duration of Pulumi operations run by Updates, by type and result.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1s … ~34min
	}, []string{"type", "result"})
	updatesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stackflow_updates_total",
		Help: "Updates finished, by type and result (succeeded, failed, conflict, aborted, canceled, stack_not_found).",
	}, []string{"type", "result"})
)

func init() {
	metrics.Registry.MustRegister(updateDuration, updatesTotal)
}
