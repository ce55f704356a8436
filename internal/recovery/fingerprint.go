package recovery

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
)

// Fingerprint identifies a request: SHA-256 over its method, path and
// canonical JSON body. Two requests that differ only in the order of object
// keys or in white space have the same fingerprint.
//
// The canonical form keeps what a lenient decoder would lose: a key given
// twice collapses to the last, but a key in another case, a null and a
// number's spelling stay as written. That the fingerprint stands for exactly
// one request, and one request for exactly one fingerprint, is the API
// decoder's part (api.decodeJSON refuses those, and drops a null field from
// the body it hands on to be fingerprinted): see its comment.
func Fingerprint(method, path string, body []byte) ([]byte, error) {
	canonical, err := CanonicalJSON(body)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", method, path)
	h.Write(canonical)
	return h.Sum(nil), nil
}

// CanonicalJSON re-encodes a JSON document with object keys sorted and no
// insignificant white space. Numbers keep their literal text. An empty body
// is the empty object.
func CanonicalJSON(body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return []byte("{}"), nil
	}
	// Decoder.More misses trailing closers ("{}}" would pass as "{}"), so
	// the whole body is checked to be exactly one JSON value first.
	if !json.Valid(body) {
		return nil, fmt.Errorf("canonical JSON: not one valid JSON value")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// encoding/json writes map keys in sorted order.
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
