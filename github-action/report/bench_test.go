package report

import (
	"fmt"
	"testing"

	"github.com/stackflow-io/stackflow/github-action/result"
)

func BenchmarkCommentBig(b *testing.B) {
	var ss []string
	for i := range 6 {
		ss = append(ss, Section(bigResult(fmt.Sprint("k", i), 6000), SectionOptions{RunURL: runURL}))
	}
	ss = append(ss, Section(result.Result{Key: "e", Status: result.Failed, Error: "x"}, SectionOptions{}))
	for b.Loop() {
		if _, err := Comment("", ss, CommentOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
