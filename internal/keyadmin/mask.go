package keyadmin

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
)

// MaskSecrets returns the JSON document b with its secrets masked, for the
// operator's eyes (docs/API.md section 9: keys show masks "any secret in
// it, such as a webhook endpoint's secret"): the string value of every
// field named "secret" is masked, and so is every webhook signing secret
// (whsec_...) in any string, which keeps its prefix, to say what kind of
// secret it was, and its last four characters, to tell two apart. Order,
// numbers and everything else are kept as they are. A b that is not JSON
// comes back as a JSON string, masked the same way.
func MaskSecrets(b []byte) json.RawMessage {
	var out bytes.Buffer
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := maskValue(dec, &out, ""); err != nil || dec.More() {
		s, _ := json.Marshal(maskSigningSecrets(string(b)))
		return s
	}
	if _, err := dec.Token(); err == nil { // trailing data after the value
		s, _ := json.Marshal(maskSigningSecrets(string(b)))
		return s
	}
	return out.Bytes()
}

// maskValue copies the next JSON value from dec to out, masking as it goes;
// key is the name of the field the value belongs to ("" in an array or at
// the top).
func maskValue(dec *json.Decoder, out *bytes.Buffer, key string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		return maskContainer(dec, out, t)
	case string:
		if key == "secret" && t != "" && signingSecret.FindString(t) != t {
			t = maskedSecret // a secret of another kind: nothing of it is shown
		} else {
			t = maskSigningSecrets(t)
		}
		return writeJSON(out, t)
	case json.Number:
		out.WriteString(t.String())
		return nil
	default: // bool, nil
		return writeJSON(out, t)
	}
}

func maskContainer(dec *json.Decoder, out *bytes.Buffer, open json.Delim) error {
	out.WriteString(open.String())
	for first := true; dec.More(); first = false {
		if !first {
			out.WriteByte(',')
		}
		key := ""
		if open == '{' {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ = tok.(string)
			if err := writeJSON(out, key); err != nil {
				return err
			}
			out.WriteByte(':')
		}
		if err := maskValue(dec, out, key); err != nil {
			return err
		}
	}
	closing, err := dec.Token()
	if err != nil {
		return err
	}
	out.WriteString(closing.(json.Delim).String())
	return nil
}

// writeJSON writes v as compact JSON, without escaping <, > and & (the
// output is read in a terminal, not embedded in HTML).
func writeJSON(out *bytes.Buffer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	out.Truncate(out.Len() - 1) // Encode's newline
	return nil
}

// maskedSecret stands for a secret of which nothing is shown.
const maskedSecret = "****"

// signingSecret is a Standard Webhooks signing secret: whsec_ and base64.
var signingSecret = regexp.MustCompile(`whsec_[A-Za-z0-9+/=_-]*`)

// minShownLength is how long a secret's part after whsec_ must be for its
// last four characters to be shown: of a shorter one, they would be a
// good part of it.
const minShownLength = 16

func maskSigningSecrets(s string) string {
	if !strings.Contains(s, "whsec_") {
		return s
	}
	return signingSecret.ReplaceAllStringFunc(s, func(secret string) string {
		rest := strings.TrimPrefix(secret, "whsec_")
		if len(rest) < minShownLength {
			return "whsec_…"
		}
		return "whsec_…" + rest[len(rest)-4:]
	})
}
