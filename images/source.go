package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Source is what the images say about the code they were built from.
type Source struct {
	// Revision is the full commit SHA (org.opencontainers.image.revision).
	Revision string
	// Version is the tag pushed and org.opencontainers.image.version; by
	// default `git describe --always --dirty`.
	Version string
	// Created is every timestamp in the images: $SOURCE_DATE_EPOCH, or the
	// commit's committer time.
	Created time.Time
}

// tagPattern is the OCI distribution spec's tag grammar.
var tagPattern = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

// ValidVersion reports whether v can be a tag (and an -X value).
func ValidVersion(v string) error {
	if !tagPattern.MatchString(v) {
		return fmt.Errorf("version %q is not a valid image tag ([A-Za-z0-9_][A-Za-z0-9._-]{0,127})", v)
	}
	return nil
}

// GitSource reads the revision, version and time of the checkout at dir.
// sourceDateEpoch is $SOURCE_DATE_EPOCH's value ("" if unset).
func GitSource(ctx context.Context, dir, sourceDateEpoch string) (Source, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
			}
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	var s Source
	var err error
	if s.Revision, err = git("rev-parse", "HEAD"); err != nil {
		return Source{}, err
	}
	if s.Version, err = git("describe", "--always", "--dirty"); err != nil {
		return Source{}, err
	}
	epoch := sourceDateEpoch
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct", "HEAD"); err != nil {
			return Source{}, err
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return Source{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: not a Unix time in seconds", epoch)
	}
	s.Created = time.Unix(sec, 0).UTC()
	return s, nil
}

// SourceDateEpoch is $SOURCE_DATE_EPOCH (reproducible-builds.org).
func SourceDateEpoch() string { return os.Getenv("SOURCE_DATE_EPOCH") }
