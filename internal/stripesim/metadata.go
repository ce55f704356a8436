package stripesim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
)

// metadata is an object's metadata, Stripe's set of key-value pairs,
// encoded as the JSON object a map[string]string encodes as (keys in
// order; {} when empty). It is a slice of pairs in order of key, not a map:
// a Go map of one pair takes some 300 bytes of heap, and every
// PaymentIntent, its charge and its refunds carry one for 30 days
// (BenchmarkSeed_memoryPerPayment).
type metadata []metadataPair

type metadataPair struct{ key, value string }

// newMetadata is md's pairs in order of key.
func newMetadata(md map[string]string) metadata {
	out := make(metadata, 0, len(md))
	for k, v := range md {
		out = append(out, metadataPair{k, v})
	}
	slices.SortFunc(out, func(a, b metadataPair) int { return cmp.Compare(a.key, b.key) })
	return out
}

// get is the value under key.
func (m metadata) get(key string) (string, bool) {
	i, ok := slices.BinarySearchFunc(m, key, func(p metadataPair, k string) int { return cmp.Compare(p.key, k) })
	if !ok {
		return "", false
	}
	return m[i].value, true
}

// MarshalJSON encodes m as a JSON object, as encoding/json encodes a map.
func (m metadata) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(p.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(p.value)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON decodes a JSON object of strings (a state file's).
func (m *metadata) UnmarshalJSON(data []byte) error {
	var md map[string]string
	if err := json.Unmarshal(data, &md); err != nil {
		return err
	}
	*m = newMetadata(md)
	return nil
}
