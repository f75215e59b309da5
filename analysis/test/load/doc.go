// Package load holds the load benchmark of the analysis service
// (BenchmarkVerificationLoad, `make bench-analysis`).
//
// The benchmark starts a real kube-apiserver and etcd (test/framework/substrate),
// creates 1,000 Stacks over 10 namespaces with the status a successful
// update leaves (observedGeneration, lastUpdate, a Ready condition), builds
// and runs ./analysis/cmd/stackflow-analysis as its own process with
// --auth=kube, and sends it, from a ServiceAccount token, an open-loop load
// of verification requests (1,000 requests/s by default, each scheduled at
// start + i/rate whatever the server's speed, so queueing counts) for random
// Stacks at their commits. It prints the latency percentiles (from the
// scheduled time and from the actual send), the achieved rate, the number of
// wrong answers, the service's resident memory (VmRSS, VmHWM from
// /proc/<pid>/status) and what the auth caches did, next to the goals
// (p99 < 5 ms, RSS < 100 MiB). It asserts nothing about timings.
//
// Run it with
//
//	make bench-analysis
//
// or, from the repository root,
//
//	eval "$(./hack/substrate.sh env)" && go test -run XXX -bench BenchmarkVerificationLoad -benchtime 1x ./analysis/test/load/
//
// Environment:
//
//	STACKFLOW_BENCH_SECONDS         load duration in seconds (default 10)
//	STACKFLOW_BENCH_RATE            offered requests per second (default 1000)
//	STACKFLOW_BENCH_AUTH_CACHE_TTL  the service's --auth-cache-ttl (default 10s, the service's default)
//	STACKFLOW_BENCH_INPROCESS=1     run the service in this process (service.Run) instead of as
//	                                its own process, so that a CPU profile holds it (with the
//	                                load generator); its memory is then not reported
//	STACKFLOW_BENCH_CPUPROFILE      a file: the CPU profile of this process during the load window
//	                                only (with STACKFLOW_BENCH_INPROCESS=1: the service's handlers)
//	STACKFLOW_BENCH_PERF            a file: perf record -g of the service process during the load
//	                                window (perf report -i <file>), the real binary unchanged
//
// Reading the figures: the service, kube-apiserver, etcd and the load
// generator share the machine (and whatever else runs on it), so the report
// gives each one's CPU during the load and how long the service's threads
// waited, runnable, for a CPU (/proc/<pid>/task/*/schedstat); it warns when
// that wait exceeds 1.25 times their run time. The auth caches expire
// --auth-cache-ttl after the warm-up: the report also splits the latencies
// at the first expiry, and STACKFLOW_BENCH_AUTH_CACHE_TTL=1h measures the
// serving path alone.
//
// The load runs once per benchmark invocation, whatever b.N is: the setup
// (control plane, Stacks, service) is done once by the parent benchmark and
// the load by the sub-benchmark "1000rps", which memoizes its result, so a
// repeated call with a larger b.N (the framework's calibration, when the
// load is shorter than -benchtime) reports the same figures without loading
// the service again. ns/op is suppressed; -benchtime 1x is still what the
// Make target passes.
//
// The benchmark is skipped when kube-apiserver or etcd is missing (run
// `make substrate`).
package load
