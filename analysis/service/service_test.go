package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		o   Options
		err string
	}{
		{Options{Auth: AuthKube}, ""},
		{Options{Auth: AuthNone, TLSCertFile: "c", TLSKeyFile: "k"}, ""},
		{Options{Auth: "basic"}, `--auth="basic": use kube or none`},
		{Options{Auth: AuthKube, TLSCertFile: "c"}, "go together"},
		{Options{Auth: AuthKube, PulumiCloudTokenSecret: "just-a-name"}, "use <namespace>/<name>"},
		{Options{Auth: AuthKube, Audiences: []string{"a,b"}}, "is not an audience"},
		{Options{Auth: AuthKube, Audiences: []string{""}}, "is not an audience"},
	} {
		err := tt.o.Validate()
		if (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%+v: %v, want %q", tt.o, err, tt.err)
		}
	}
}

// TestServeTLSReloadsCertificate: the service serves HTTPS with the given
// certificate and, when the files are replaced (as cert-manager rotates
// them), the new one, without a restart; --auth=none warns at start.
func TestServeTLSReloadsCertificate(t *testing.T) {
	cp := substrate.StartControlPlaneT(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeCert(t, certFile, keyFile, "first")

	var logs strings.Builder
	logger := funcr.New(func(prefix, args string) { fmt.Fprintln(&logs, prefix, args) }, funcr.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Auth: AuthNone, TLSCertFile: certFile, TLSKeyFile: keyFile, Config: cp.Config, Listener: ln, Log: logger, Ready: ready})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatal("not ready in a minute")
	}
	served := func() string {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
		resp, err := client.Get("https://" + ln.Addr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("readyz: %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != "first" {
		t.Fatalf("served certificate %q", got)
	}
	writeCert(t, certFile, keyFile, "second")
	deadline := time.Now().Add(30 * time.Second)
	for served() != "second" {
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was not served within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "--auth=none") {
		t.Errorf("no warning about --auth=none in the log:\n%s", logs.String())
	}
	// Plain HTTP is refused on the TLS port.
	if resp, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP answered on the TLS listener")
		}
	}
}

// writeCert writes a self-signed certificate for cn, replacing the files
// the way a Secret volume update does (new files renamed into place).
func writeCert(t *testing.T, certFile, keyFile, cn string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{keyFile: {Type: "EC PRIVATE KEY", Bytes: kb}, certFile: {Type: "CERTIFICATE", Bytes: der}} {
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
}
