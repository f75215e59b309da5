package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// MaxBytes is the largest plan Stackflow keeps: it is stored in a Secret
// (at most 1 MiB, with its metadata) and sent to the workspace in one
// message. A preview whose plan is larger fails, saying so.
const MaxBytes = 512 << 10

// MaxResources bounds the affected resources a summary lists (status stays
// small); Summary.More counts those left out.
const MaxResources = 50

// Plan is a parsed update plan: the resources it plans, each with the steps
// (operations) the update may run for it.
type Plan struct {
	// Resources maps a resource's URN to its planned steps ("create",
	// "update", "delete", "replace", "same", …) in the engine's order.
	Resources map[string][]string
	// canonical is the plan's content without what differs between
	// previews of the same change (see the package doc).
	canonical []byte
}

// Parse reads an update plan, refusing one larger than MaxBytes or not in
// Pulumi's plan format.
func Parse(data []byte) (*Plan, error) {
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("the update plan is %d bytes, more than the %d Stackflow keeps: split the stack, or target fewer resources", len(data), MaxBytes)
	}
	var raw struct {
		ResourcePlans map[string]json.RawMessage `json:"resourcePlans"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("the update plan is not Pulumi's plan format: %w", err)
	}
	if raw.ResourcePlans == nil {
		return nil, fmt.Errorf("the update plan is not Pulumi's plan format: no resourcePlans")
	}
	p := &Plan{Resources: map[string][]string{}}
	canon := map[string]any{}
	for urn, rp := range raw.ResourcePlans {
		var v any
		d := json.NewDecoder(bytes.NewReader(rp))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("the update plan's entry for %s: %w", urn, err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("the update plan's entry for %s is not an object", urn)
		}
		delete(obj, "seed")
		var steps []string
		if list, ok := obj["steps"].([]any); ok {
			for _, s := range list {
				if str, ok := s.(string); ok {
					steps = append(steps, str)
				}
			}
		}
		p.Resources[urn] = steps
		canon[urn] = maskCiphertexts(obj)
	}
	// encoding/json writes map keys sorted: the bytes are canonical.
	b, err := json.Marshal(canon)
	if err != nil {
		return nil, err
	}
	p.canonical = b
	return p, nil
}

// secretSig is the key Pulumi marks a secret value with in serialized
// property values.
const secretSig = "4dabf18193072939515e22adb298388d"

// maskCiphertexts replaces the ciphertext of every secret value (a fresh
// nonce per preview) by a constant.
func maskCiphertexts(v any) any {
	switch t := v.(type) {
	case map[string]any:
		if _, secret := t[secretSig]; secret {
			if _, ok := t["ciphertext"]; ok {
				t["ciphertext"] = "[secret]"
			}
		}
		for k, e := range t {
			t[k] = maskCiphertexts(e)
		}
	case []any:
		for i, e := range t {
			t[i] = maskCiphertexts(e)
		}
	}
	return v
}

// Fingerprint is the plan's identity with the Stack's inputs digest (see
// the package doc): hex SHA-256.
func (p *Plan) Fingerprint(inputsDigest string) string {
	h := sha256.New()
	h.Write([]byte("stackflow-plan-v1\x00"))
	h.Write([]byte(inputsDigest))
	h.Write([]byte{0})
	h.Write(p.canonical)
	return hex.EncodeToString(h.Sum(nil))
}

// Summary is what status shows of a plan.
type Summary struct {
	// Changes counts resources by the operation planned for them (create,
	// update, delete, replace, …), without unchanged ones.
	Changes map[string]int64
	// Resources lists the affected resources as "<op> <urn>", sorted, at
	// most MaxResources.
	Resources []string
	// More is how many affected resources Resources leaves out.
	More int
}

// Summarize counts the plan's operations. A resource's operation is its
// most consequential step: replace (any of create-replacement,
// delete-replaced, replace) over delete over create over update; the Stack
// resource itself (pulumi:pulumi:Stack), default providers and unchanged
// resources are left out.
func (p *Plan) Summarize() Summary {
	s := Summary{Changes: map[string]int64{}}
	var all []string
	for urn, steps := range p.Resources {
		if strings.Contains(urn, "::pulumi:pulumi:Stack::") || defaultProvider(urn) {
			continue
		}
		op := operation(steps)
		if op == "" {
			continue
		}
		s.Changes[op]++
		all = append(all, op+" "+urn)
	}
	sort.Strings(all)
	if len(all) > MaxResources {
		s.More = len(all) - MaxResources
		all = all[:MaxResources]
	}
	s.Resources = all
	return s
}

// defaultProvider: the URN is of a provider the engine made by itself
// (named "default" or "default_<version>"), which Pulumi's own summaries
// do not count either.
func defaultProvider(urn string) bool {
	i := strings.Index(urn, "::pulumi:providers:")
	if i < 0 {
		return false
	}
	name := urn[strings.LastIndex(urn, "::")+2:]
	return name == "default" || strings.HasPrefix(name, "default_")
}

// operation is the one word for a resource's planned steps ("" for none
// that change anything).
func operation(steps []string) string {
	rank := map[string]int{"update": 1, "create": 2, "delete": 3, "replace": 4}
	best := ""
	for _, st := range steps {
		op := st
		switch st {
		case "same", "read", "refresh", "":
			continue
		case "create-replacement", "delete-replaced", "replace", "discard-replaced":
			op = "replace"
		case "import", "import-replacement":
			op = "import"
		}
		if best == "" || rank[op] > rank[best] {
			best = op
		}
	}
	return best
}

// Deletes says whether the plan deletes or replaces a resource (what a
// promotion's denyOn: delete refuses).
func (s Summary) Deletes() bool { return s.Changes["delete"] > 0 || s.Changes["replace"] > 0 }

// Text is the summary in one line: "+1 ~2 -0 ±1" (create, update, delete,
// replace; others by name).
func (s Summary) Text() string {
	parts := []string{
		fmt.Sprintf("+%d", s.Changes["create"]), fmt.Sprintf("~%d", s.Changes["update"]), fmt.Sprintf("-%d", s.Changes["delete"]),
	}
	if n := s.Changes["replace"]; n > 0 {
		parts = append(parts, fmt.Sprintf("±%d", n))
	}
	var others []string
	for op, n := range s.Changes {
		switch op {
		case "create", "update", "delete", "replace":
		default:
			others = append(others, fmt.Sprintf("%s %d", op, n))
		}
	}
	sort.Strings(others)
	return strings.Join(append(parts, others...), " ")
}
