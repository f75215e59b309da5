package gitrepo

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHServer serves the bare repositories under a root over SSH the way git
// hosts do: it accepts one client public key, and runs the real
// git-upload-pack (fetch, ls-remote) for an exec request
// "git-upload-pack '<path>'", wiring stdin, stdout, stderr and the exit
// status. Anything else is refused.
type SSHServer struct {
	// Addr is its loopback address.
	Addr string
	// HostKey is the server's host key.
	HostKey ssh.PublicKey

	root     string
	listener net.Listener
	mu       sync.Mutex
	execs    []string
	wg       sync.WaitGroup
}

// SSHKey is a client key pair: PrivateKey is PEM (OpenSSH format), what a
// Stack's sshPrivateKey Secret holds.
type SSHKey struct {
	PrivateKey string
	Public     ssh.PublicKey
}

// NewSSHKey makes an ed25519 key pair.
func NewSSHKey(t testing.TB) SSHKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return SSHKey{PrivateKey: string(pem.EncodeToMemory(block)), Public: sshPub}
}

// NewSSHServer serves root's repositories (root/<name> at
// ssh://git@Addr/<name>) to the holder of authorized's private key, until
// the test ends.
func NewSSHServer(t testing.TB, root string, authorized ssh.PublicKey) *SSHServer {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(key.Marshal(), authorized.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("public key not authorized")
		},
	}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &SSHServer{Addr: l.Addr().String(), HostKey: signer.PublicKey(), root: root, listener: l}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(conn, cfg)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		s.wg.Wait()
	})
	return s
}

// KnownHosts is the known_hosts line for this server's host key.
func (s *SSHServer) KnownHosts() string { return s.KnownHostsAs(s.Addr) }

// KnownHostsAs is a known_hosts line giving this server's host key to
// another address: what known_hosts holds when addr's key changed, or an
// impostor answers at addr.
func (s *SSHServer) KnownHostsAs(addr string) string {
	return knownhosts.Line([]string{knownhosts.Normalize(addr)}, s.HostKey) + "\n"
}

// Execs are the commands clients ran, in order.
func (s *SSHServer) Execs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.execs...)
}

// SSHURL is the repository's URL on server s (the bare repository must be
// under s's root).
func (r *Repo) SSHURL(s *SSHServer) string {
	rel, _ := filepath.Rel(s.root, r.Bare)
	return "ssh://git@" + s.Addr + "/" + filepath.ToSlash(rel)
}

func (s *SSHServer) serve(conn net.Conn, cfg *ssh.ServerConfig) {
	defer conn.Close()
	sconn, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return // refused key, or the client rejected our host key
	}
	defer sconn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			return
		}
		go s.session(ch, chReqs)
	}
}

// session answers env requests (git sends GIT_PROTOCOL) and one exec.
func (s *SSHServer) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		switch req.Type {
		case "env":
			_ = req.Reply(true, nil)
		case "exec":
			var payload struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
				_ = req.Reply(false, nil)
				return
			}
			s.mu.Lock()
			s.execs = append(s.execs, payload.Command)
			s.mu.Unlock()
			dir, err := s.repository(payload.Command)
			if err != nil {
				_ = req.Reply(true, nil)
				fmt.Fprintf(ch.Stderr(), "fatal: %v\n", err)
				exit(ch, 128)
				return
			}
			_ = req.Reply(true, nil)
			exit(ch, uploadPack(ch, dir))
			return
		default:
			_ = req.Reply(false, nil)
		}
	}
}

// repository parses "git-upload-pack '/name'" into root/name.
func (s *SSHServer) repository(command string) (string, error) {
	prog, arg, ok := strings.Cut(command, " ")
	if !ok || prog != "git-upload-pack" {
		return "", fmt.Errorf("only git-upload-pack is served, not %q", command)
	}
	arg = strings.Trim(arg, "'")
	rel := path.Clean("/" + arg)
	dir := filepath.Join(s.root, filepath.FromSlash(rel))
	if !strings.HasPrefix(dir, s.root+string(filepath.Separator)) {
		return "", fmt.Errorf("%q is not a repository", arg)
	}
	return dir, nil
}

// uploadPack runs git-upload-pack on dir over the channel and returns its
// exit status. stdin is copied by hand: the client closes its side only
// after the command exited, so exec must not wait for it.
func uploadPack(ch ssh.Channel, dir string) int {
	cmd := exec.Command("git", "upload-pack", "--strict", dir)
	cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=" + dir}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 128
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(ch.Stderr(), "fatal: %v\n", err)
		return 128
	}
	go func() {
		_, _ = io.Copy(stdin, ch)
		_ = stdin.Close()
	}()
	if err := cmd.Wait(); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return exitErr.ExitCode()
		}
		return 128
	}
	return 0
}

func exit(ch ssh.Channel, status int) {
	_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
}
