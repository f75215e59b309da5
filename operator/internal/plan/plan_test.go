package plan

import (
	"os"
	"strings"
	"testing"
)

func mustParse(t *testing.T, file string) *Plan {
	t.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return p
}

// Two previews of the same change (plans written by pulumi v3.274.1 a few
// seconds apart: other time, seeds and secret nonces) have one fingerprint;
// another change or other inputs have another.
func TestFingerprintIdentifiesTheChange(t *testing.T) {
	a, b := mustParse(t, "create-secret-1.json"), mustParse(t, "create-secret-2.json")
	if a.Fingerprint("d1") != b.Fingerprint("d1") {
		t.Errorf("two previews of the same change differ: %s vs %s", a.Fingerprint("d1"), b.Fingerprint("d1"))
	}
	if a.Fingerprint("d1") == a.Fingerprint("d2") {
		t.Error("other inputs digests gave the same fingerprint")
	}
	c := mustParse(t, "update.json")
	if c.Fingerprint("d1") == a.Fingerprint("d1") {
		t.Error("another change gave the same fingerprint")
	}
	if len(a.Fingerprint("")) != 64 {
		t.Errorf("fingerprint %q is not hex SHA-256", a.Fingerprint(""))
	}
}

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		file, text string
		resources  []string
		deletes    bool
	}{
		{"create-secret-1.json", "+2 ~0 -0", []string{
			"create urn:pulumi:dev::plantry::stackflowtest:index:Record::a",
			"create urn:pulumi:dev::plantry::stackflowtest:index:Record::b",
		}, false},
		{"update.json", "+0 ~1 -0", []string{"update urn:pulumi:dev::plantry::stackflowtest:index:Record::a"}, false},
		{"replace-delete.json", "+0 ~0 -1 ±1", []string{
			"delete urn:pulumi:dev::plantry::stackflowtest:index:Record::b",
			"replace urn:pulumi:dev::plantry::stackflowtest:index:Record::a",
		}, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s := mustParse(t, tc.file).Summarize()
			if got := s.Text(); got != tc.text {
				t.Errorf("Text() = %q, want %q", got, tc.text)
			}
			if strings.Join(s.Resources, "\n") != strings.Join(tc.resources, "\n") {
				t.Errorf("Resources = %q, want %q", s.Resources, tc.resources)
			}
			if s.Deletes() != tc.deletes {
				t.Errorf("Deletes() = %v", s.Deletes())
			}
		})
	}
}

func TestSummaryBoundsResources(t *testing.T) {
	p := &Plan{Resources: map[string][]string{}}
	for i := range MaxResources + 7 {
		p.Resources["urn:pulumi:dev::p::t::r"+string(rune('a'+i%26))+strings.Repeat("x", i)] = []string{"create"}
	}
	s := p.Summarize()
	if len(s.Resources) != MaxResources || s.More != 7 || s.Changes["create"] != MaxResources+7 {
		t.Errorf("got %d resources, %d more, %d creates", len(s.Resources), s.More, s.Changes["create"])
	}
}

func TestParseRefuses(t *testing.T) {
	for name, data := range map[string]string{
		"not json":          "nope",
		"no resource plans": `{"manifest":{}}`,
		"entry not object":  `{"resourcePlans":{"urn:x":[1]}}`,
		"too large":         `{"resourcePlans":{}}` + strings.Repeat(" ", MaxBytes),
	} {
		if _, err := Parse([]byte(data)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	_, err := Parse([]byte(strings.Repeat(" ", MaxBytes+1)))
	if err == nil || !strings.Contains(err.Error(), "more than the 524288") {
		t.Errorf("a large plan's error does not say the bound: %v", err)
	}
}

func TestViolation(t *testing.T) {
	text := "code: 255\nstdout: \nstderr: error: resource urn:pulumi:dev::plantry::stackflowtest:index:Record::a violates plan: properties changed: ~~content[{uno}!={eins}]\n"
	urn, detail, ok := Violation(text)
	if !ok || urn != "urn:pulumi:dev::plantry::stackflowtest:index:Record::a" || detail != "properties changed: ~~content[{uno}!={eins}]" {
		t.Errorf("Violation = %q, %q, %v", urn, detail, ok)
	}
	// An operation the plan has no step for (here: the resources were
	// destroyed out of band after the preview), as pulumi v3.274.1 says it.
	text = "stdout: Updating (dev):\n    pulumi:pulumi:Stack plantry-dev running error: create is not allowed by the plan: this resource is constrained to same\n    pulumi:pulumi:Stack plantry-dev  1 error\nDiagnostics:\n  pulumi:pulumi:Stack (plantry-dev):\n    error: create is not allowed by the plan: this resource is constrained to same\n"
	res, detail, ok := Violation(text)
	if !ok || res != "pulumi:pulumi:Stack plantry-dev" || detail != "create is not allowed by the plan: this resource is constrained to same" {
		t.Errorf("Violation = %q, %q, %v", res, detail, ok)
	}
	if res, detail, ok := Violation("error: delete is not allowed by the plan: no steps were expected for this resource"); !ok || res != "" || !strings.HasPrefix(detail, "delete is not allowed") {
		t.Errorf("bare: %q, %q, %v", res, detail, ok)
	}
	if _, _, ok := Violation("error: update failed"); ok {
		t.Error("an ordinary failure read as a violation")
	}
}

func FuzzParse(f *testing.F) {
	for _, file := range []string{"create-secret-1.json", "update.json", "replace-delete.json"} {
		b, err := os.ReadFile("testdata/" + file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"resourcePlans":{"u":{"steps":[1,"x",null],"goal":{"a":{"4dabf18193072939515e22adb298388d":1,"ciphertext":[]}}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		if p.Fingerprint("x") != p.Fingerprint("x") {
			t.Fatal("fingerprint is not stable")
		}
		s := p.Summarize()
		if len(s.Resources) > MaxResources {
			t.Fatal("summary over its bound")
		}
		_ = s.Text()
	})
}
