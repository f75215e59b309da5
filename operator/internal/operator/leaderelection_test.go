package operator

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestLeaderElectionValidate(t *testing.T) {
	for _, tc := range []struct {
		name                string
		lease, renew, retry time.Duration
		wantErr             string
	}{
		{"defaults", DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, ""},
		{"short", 4 * time.Second, 3 * time.Second, time.Second, ""},
		{"lease not longer than renew", 3 * time.Second, 3 * time.Second, time.Second, "--leader-elect-lease-duration (3s) must be longer than --leader-elect-renew-deadline (3s)"},
		{"renew too close to retry", 4 * time.Second, 1200 * time.Millisecond, time.Second, "--leader-elect-renew-deadline (1.2s) must be longer than 1.2 × --leader-elect-retry-period (1s)"},
		{"zero retry", 4 * time.Second, 3 * time.Second, 0, "must be positive"},
		{"negative lease", -time.Second, 3 * time.Second, time.Second, "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := LeaderElection{Enabled: true, LeaseDuration: tc.lease, RenewDeadline: tc.renew, RetryPeriod: tc.retry}.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestLeaseNamespace(t *testing.T) {
	file := func(content string, err error) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if p != inClusterNamespaceFile {
				t.Fatalf("read %s", p)
			}
			return []byte(content), err
		}
	}
	for _, tc := range []struct {
		name, given string
		read        func(string) ([]byte, error)
		want        string
		wantErr     string
	}{
		{"given wins", "ops", file("pod-ns", nil), "ops", ""},
		{"in a cluster", "", file("stackflow-system\n", nil), "stackflow-system", ""},
		{"outside a cluster", "", file("", fs.ErrNotExist), "", "set --leader-elect-namespace"},
		{"unreadable", "", file("", errors.New("permission denied")), "", "permission denied"},
		{"empty file", "", file(" \n", nil), "", "is empty: set --leader-elect-namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := leaseNamespace(tc.given, tc.read)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("leaseNamespace = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("leaseNamespace = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestLeaseIdentity(t *testing.T) {
	host := func() (string, error) { return "operator-7d9f", nil }
	if id, err := leaseIdentity("pod-a", host); err != nil || id != "pod-a" {
		t.Fatalf("given identity: %q, %v", id, err)
	}
	a, err := leaseIdentity("", host)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := leaseIdentity("", host)
	if !strings.HasPrefix(a, "operator-7d9f_") || a == b {
		t.Fatalf("default identities %q, %q: want <hostname>_<unique>", a, b)
	}
	if _, err := leaseIdentity("", func() (string, error) { return "", errors.New("no hostname") }); err == nil {
		t.Fatal("a hostname failure was not reported")
	}
}

func TestLeaderElectionApply(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	var off ctrl.Options
	if id, err := (LeaderElection{Namespace: "ops"}).Apply(cfg, &off); err != nil || id != "" || off.LeaderElection || off.LeaderElectionResourceLockInterface != nil {
		t.Fatalf("disabled: id %q, err %v, options %+v", id, err, off)
	}

	le := LeaderElection{Enabled: true, Namespace: "ops", Identity: "replica-1",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second}
	var o ctrl.Options
	id, err := le.Apply(cfg, &o)
	if err != nil {
		t.Fatal(err)
	}
	if id != "replica-1" || !o.LeaderElection || !o.LeaderElectionReleaseOnCancel ||
		o.LeaderElectionID != LeaderElectionID || o.LeaderElectionNamespace != "ops" {
		t.Fatalf("options: id %q %+v", id, o)
	}
	if *o.LeaseDuration != 4*time.Second || *o.RenewDeadline != 3*time.Second || *o.RetryPeriod != time.Second {
		t.Fatalf("durations: %s %s %s", *o.LeaseDuration, *o.RenewDeadline, *o.RetryPeriod)
	}
	lock, ok := o.LeaderElectionResourceLockInterface.(*resourcelock.LeaseLock)
	if !ok {
		t.Fatalf("lock is %T, want a Lease lock", o.LeaderElectionResourceLockInterface)
	}
	if lock.Identity() != "replica-1" || lock.LeaseMeta.Namespace != "ops" || lock.LeaseMeta.Name != LeaderElectionID {
		t.Fatalf("lock: identity %q, lease %s/%s", lock.Identity(), lock.LeaseMeta.Namespace, lock.LeaseMeta.Name)
	}
	if cfg.Timeout != 0 || cfg.UserAgent != "" {
		t.Fatalf("the caller's config was changed: %+v", cfg)
	}

	bad := le
	bad.RenewDeadline = 5 * time.Second
	if _, err := bad.Apply(cfg, &ctrl.Options{}); err == nil || !strings.Contains(err.Error(), "--leader-elect-lease-duration") {
		t.Fatalf("invalid durations: %v", err)
	}
}
