package images

import (
	"fmt"
	"path"
	"strings"
)

// Spec describes one image: which binaries go where, how it starts, and what
// else it holds. Every image also gets the base layer (see base.go).
type Spec struct {
	// Name is the repository name, e.g. "stackflow-operator"; it is the
	// layout directory's name and the pushed repository under the registry.
	Name string
	// Description becomes org.opencontainers.image.description.
	Description string
	// Binaries are the Go main packages built into the image.
	Binaries []Binary
	// Entrypoint and Cmd are the image config's; Entrypoint is required.
	Entrypoint []string
	Cmd        []string
	// Env is added to the base environment (PATH, SSL_CERT_FILE).
	Env []string
	// Files are extra regular files (configuration, non-Go executables).
	Files []File
	// Dirs are directories to create, e.g. a writable /tmp.
	Dirs []Dir
	// ExposedPorts are documentation, as in a Dockerfile, e.g. "8080/tcp".
	ExposedPorts []string
	// Users are added to the base layer's root and nonroot: the image's own
	// layer then carries /etc/passwd and /etc/group with all of them.
	Users []Account
	// Platforms, if set, are the only platforms the image can be built for
	// (e.g. it holds host executables); Build fails for any other.
	Platforms []string
}

// Binary is a Go main package and where its executable lands in the image.
type Binary struct {
	// Package is the import path relative to the module root, e.g.
	// "./operator/cmd/operator".
	Package string
	// Path is the absolute path in the image, e.g. "/operator".
	Path string
}

// File is a regular file in an image: Content, or the host file at Source
// read at build time.
type File struct {
	Path    string
	Content []byte
	Source  string
	// Mode is the Unix permission bits; 0 means 0o644.
	Mode int64
}

// Account is a user in /etc/passwd and a group of the same name and ID in
// /etc/group.
type Account struct {
	Name     string
	UID, GID int
	Home     string
}

// Dir is a directory in an image.
type Dir struct {
	Path string
	// Mode is the Unix permission bits (sticky bit included, 0o1777 for a
	// /tmp); 0 means 0o755.
	Mode     int64
	UID, GID int
}

// Validate reports the first thing wrong with s.
func (s Spec) Validate() error {
	if s.Name == "" || strings.ContainsAny(s.Name, "/: ") || strings.ToLower(s.Name) != s.Name {
		return fmt.Errorf("image name %q must be a lowercase repository name without '/', ':' or spaces", s.Name)
	}
	if len(s.Entrypoint) == 0 {
		return fmt.Errorf("image %s: no entrypoint", s.Name)
	}
	seen := map[string]bool{}
	claim := func(p string) error {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return fmt.Errorf("image %s: path %q must be absolute and clean", s.Name, p)
		}
		if seen[p] {
			return fmt.Errorf("image %s: path %s given twice", s.Name, p)
		}
		if reservedPaths[p] {
			return fmt.Errorf("image %s: path %s belongs to the base layer", s.Name, p)
		}
		seen[p] = true
		return nil
	}
	for _, b := range s.Binaries {
		if !strings.HasPrefix(b.Package, "./") {
			return fmt.Errorf("image %s: package %q must be relative to the module root (./…)", s.Name, b.Package)
		}
		if err := claim(b.Path); err != nil {
			return err
		}
	}
	for _, f := range s.Files {
		if (f.Content == nil) == (f.Source == "") {
			return fmt.Errorf("image %s: file %s needs exactly one of Content and Source", s.Name, f.Path)
		}
		if err := claim(f.Path); err != nil {
			return err
		}
	}
	for _, d := range s.Dirs {
		if err := claim(d.Path); err != nil {
			return err
		}
	}
	return nil
}

// Select returns the specs named in names, in the order given; no names
// means all of them.
func Select(specs []Spec, names []string) ([]Spec, error) {
	if len(names) == 0 {
		return specs, nil
	}
	var out []Spec
	for _, n := range names {
		found := false
		for _, s := range specs {
			if s.Name == n {
				out, found = append(out, s), true
				break
			}
		}
		if !found {
			var known []string
			for _, s := range specs {
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("unknown image %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}
