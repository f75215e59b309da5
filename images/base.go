package images

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// The nonroot user and group, as in distroless: UID and GID 65532.
const (
	NonRootUID = 65532
	NonRootGID = 65532
	// User is the image config's User.
	User = "65532:65532"
)

// DefaultCABundle is where Debian's (and Ubuntu's) ca-certificates package
// keeps the bundle Go's crypto/x509 reads on Linux.
const DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"

// CABundlePath is the bundle's path in every image.
const CABundlePath = "/etc/ssl/certs/ca-certificates.crt"

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
)

// reservedPaths are the base layer's; a Spec may not put anything there.
var reservedPaths = map[string]bool{
	"/etc/passwd":   true,
	"/etc/group":    true,
	CABundlePath:    true,
	"/home/nonroot": true,
}

// baseEntries are the files every image has: the CA bundle read from
// caBundle on this machine, /etc/passwd and /etc/group with root and
// nonroot, and nonroot's home directory.
func baseEntries(caBundle string) ([]entry, error) {
	ca, err := os.ReadFile(caBundle)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("CA bundle %s does not exist: install Debian's ca-certificates package (apt-get install ca-certificates) or pass another bundle with --ca-bundle", caBundle)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle: %w", err)
	}
	if len(ca) == 0 {
		return nil, fmt.Errorf("CA bundle %s is empty", caBundle)
	}
	return []entry{
		{path: "/etc/passwd", mode: 0o644, content: []byte(passwd)},
		{path: "/etc/group", mode: 0o644, content: []byte(group)},
		{path: CABundlePath, mode: 0o644, content: ca},
		{path: "/home/nonroot", dir: true, mode: 0o700, uid: NonRootUID, gid: NonRootGID},
	}, nil
}
