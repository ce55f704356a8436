package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// readBody reads the request body, turning an oversized one into 413.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, bodyTooLarge()
	}
	if err != nil {
		return nil, validationFailed("reading the request body: %v", err)
	}
	return body, nil
}

// decodeJSON decodes one JSON object from body into dst, strictly: unknown
// fields, a field given twice or in another case, trailing data, wrong types,
// NUL and invalid UTF-8 are 400 validation_failed. An empty body decodes as
// {} when allowEmpty is set. It returns the request's body as the service
// takes it: body itself, or, when a field of it was null, body without those
// members (API.md section 2: an optional field that is null is the same as a
// field left out, in the fingerprint too). The request is fingerprinted and
// stored by what it returns, never by the body as sent.
//
// The request is fingerprinted by the canonical JSON of that body
// (recovery.CanonicalJSON: object keys sorted, strings decoded and encoded
// again, numbers as written), and what decodeJSON accepts corresponds to that
// canonical form one to one: two bodies with the same canonical JSON decode
// to the same request, and two bodies that decode to the same request have
// the same canonical JSON. That holds because of what the strict walk below
// refuses or drops, case by case:
//
//   - Field names. encoding/json matches them case-insensitively (with
//     Unicode folding: "ſ" is "s") and lets the last of two win, while the
//     canonical form keeps every key as written. Every key of an object
//     decoded into a struct must be exactly one of its fields, at most once;
//     a map's keys at most once. Keys are compared decoded, as both sides
//     compare them ("\u0061mount" is "amount").
//   - null. Decoding null leaves a field as if it were absent, while the
//     canonical form would keep it: a field of a request struct that is null
//     is dropped from the returned body, so both sides see it absent. A
//     required field so dropped is then missing, which the route refuses
//     (400). Anywhere else null is refused: the body itself, an item of an
//     array, a map's value (decoding would make it "", which is a value).
//   - Numbers. The canonical form keeps a number's text; an integer field
//     accepts only the text strconv.FormatInt writes for its value (no -0,
//     no 2.0e3, no 2000.0), so one value has one spelling.
//   - Strings. Both sides decode escapes with the same code ("\u0075sd" is
//     "usd"), and encoding/json writes a decoded string back in one way
//     only. Invalid UTF-8 and lone UTF-16 surrogates both sides would turn
//     into U+FFFD alike, which keeps the correspondence but is not what the
//     client sent: they are refused (utf8.Valid and checkSurrogates here,
//     checkText for each string, which also refuses NUL, which PostgreSQL
//     cannot store).
//   - Everything else (white space, key order) the canonical form removes
//     and decoding ignores.
//
// Request types are structs of pointers to scalars, slices of strings, and
// maps of strings: strictFields lists what the walk supports.
func decodeJSON(body []byte, dst any, allowEmpty bool) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return body, nil
		}
		return nil, validationFailed("The request needs a JSON body.")
	}
	if !utf8.Valid(body) {
		return nil, validationFailed("The body is not valid UTF-8.")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := walker{dec: dec}
	if err := w.value(reflect.TypeOf(dst).Elem(), "", false); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, validationFailed("The body must hold exactly one JSON object.")
	}
	// The walk read every token, so the string escapes are known to be well
	// formed; what remains is whether each one names a character.
	if err := checkSurrogates(body); err != nil {
		return nil, err
	}
	if w.nulls {
		var err error
		if body, err = dropNullFields(body); err != nil {
			return nil, err
		}
	}
	dec = json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields() // the walk has refused them already
	if err := dec.Decode(dst); err != nil {
		return nil, validationFailed("%s", describeJSONError(err))
	}
	return body, nil
}

// dropNullFields writes body again without its members that are null. The
// walk has allowed null only for a field of a request struct, and request
// structs nest no structs, so those are the top-level object's members.
// Writing it again changes only what the canonical JSON removes anyway (key
// order, white space, string escapes; numbers keep their text).
func dropNullFields(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var members map[string]any
	if err := dec.Decode(&members); err != nil {
		return nil, validationFailed("%s", describeJSONError(err))
	}
	for name, v := range members {
		if v == nil {
			delete(members, name)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(members); err != nil {
		return nil, fmt.Errorf("writing the body without its null fields: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// walker reads a body's tokens in step with the type it decodes into.
type walker struct {
	dec *json.Decoder
	// nulls is set when a field was null (and is to be dropped).
	nulls bool
}

// value reads the next JSON value, which is to be decoded into a t, and
// refuses what would make the decoded value differ from the canonical JSON
// (see decodeJSON). field says the value is a member of the body's object
// (which may be null, and is then dropped). Type mismatches of scalars are
// left to the decoding that follows, which words them; a JSON object or
// array where t wants neither is refused here, so the walk never descends
// into a value without a type.
func (w *walker) value(t reflect.Type, path string, field bool) error {
	dec := w.dec
	tok, err := token(dec)
	if err != nil {
		return err
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok := tok.(type) {
	case nil:
		switch {
		case path == "":
			return validationFailed("The body must be a JSON object, not null.")
		case field:
			w.nulls = true
			return nil
		}
		return validationFailed("%s is null: only a field may be null (it is then left out), not %s.", path, describeItem(path))
	case string:
		return checkText(tok, cmp.Or(path, "The body"))
	case json.Number:
		if isInt(t.Kind()) {
			if n, err := strconv.ParseInt(tok.String(), 10, 64); err != nil || strconv.FormatInt(n, 10) != tok.String() {
				return validationFailed("%s must be a whole number written as one (such as 2000), not %s.", path, tok)
			}
		}
		return nil
	case bool:
		return nil
	case json.Delim:
		switch {
		case tok == '{' && t.Kind() == reflect.Struct:
			return w.members(t, path)
		case tok == '{' && t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
			return w.mapEntries(t, path)
		case tok == '[' && t.Kind() == reflect.Slice:
			for i := 0; dec.More(); i++ {
				if err := w.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i), false); err != nil {
					return err
				}
			}
			_, err := token(dec)
			return err
		}
		what := map[json.Delim]string{'{': "an object", '[': "an array"}[tok]
		if path == "" {
			return validationFailed("The body must be a JSON object, not %s.", what)
		}
		return validationFailed("%s must be %s, not %s.", path, describeType(t), what)
	}
	return fmt.Errorf("walker.value: unexpected token %T", tok)
}

// token reads the next token; a syntax error is the client's.
func token(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, validationFailed("%s", describeJSONError(err))
	}
	return tok, nil
}

// members reads the members of an object decoded into the struct t. Only
// the body's own members may be null (dropNullFields drops those).
func (w *walker) members(t reflect.Type, path string) error {
	dec := w.dec
	fields := strictFields(t)
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		name, err := objectKey(dec, path)
		if err != nil {
			return err
		}
		field, ok := fields[name]
		if !ok {
			for known := range fields {
				if strings.EqualFold(known, name) {
					return validationFailed("%q is not a field: field names are case-sensitive (%q is).", join(path, name), join(path, known))
				}
			}
			return validationFailed("%q is not a field.", join(path, name))
		}
		if seen[name] {
			return validationFailed("%q is given twice.", join(path, name))
		}
		seen[name] = true
		if err := w.value(field, join(path, name), path == ""); err != nil {
			return err
		}
	}
	_, err := token(dec) // the closing brace
	return err
}

// mapEntries reads the members of an object decoded into the map t.
func (w *walker) mapEntries(t reflect.Type, path string) error {
	dec := w.dec
	seen := make(map[string]bool)
	for dec.More() {
		key, err := objectKey(dec, path)
		if err != nil {
			return err
		}
		if seen[key] {
			return validationFailed("%s: the key %q is given twice.", path, key)
		}
		seen[key] = true
		if err := w.value(t.Elem(), join(path, key), false); err != nil {
			return err
		}
	}
	_, err := token(dec) // the closing brace
	return err
}

// objectKey reads an object's next key, checked as any other string.
func objectKey(dec *json.Decoder, path string) (string, error) {
	tok, err := token(dec)
	if err != nil {
		return "", err
	}
	key, _ := tok.(string) // the decoder's syntax check allows nothing else here
	where := "A key"
	if path != "" {
		where = path + ": a key"
	}
	return key, checkText(key, where)
}

// strictFields maps the JSON names of a request struct's fields to their
// types. Request types are plain: exported fields with a json tag naming
// them, no embedded structs, no ",string" option (a test holds them to it).
func strictFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// describeItem names what path is: an array's item or a map's value.
func describeItem(path string) string {
	if strings.HasSuffix(path, "]") {
		return "an item of a list"
	}
	return "a value of a map"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func isInt(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return true
	}
	return false
}

func describeType(t reflect.Type) string {
	switch {
	case isInt(t.Kind()):
		return "a whole number"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.Map:
		return "an object"
	default:
		return "a " + t.String()
	}
}

// checkSurrogates refuses a \u escape naming half of a UTF-16 surrogate pair
// without the other half: it names no character, and encoding/json would
// decode it as U+FFFD. body is well-formed JSON.
func checkSurrogates(body []byte) error {
	inString := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			i++
			if body[i] != 'u' {
				continue
			}
			r := hex4(body[i+1 : i+5])
			i += 4
			if !utf16.IsSurrogate(r) {
				continue
			}
			if r < 0xdc00 && i+6 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
				if low := hex4(body[i+3 : i+7]); utf16.DecodeRune(r, low) != utf8.RuneError {
					i += 6
					continue
				}
			}
			return validationFailed("The body holds a lone UTF-16 surrogate (\\u%04x): it is not a character.", r)
		}
	}
	return nil
}

// hex4 is the value of four hexadecimal digits, known to be well formed.
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 16)
	return rune(n)
}

func describeJSONError(err error) string {
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("The body is not valid JSON (at byte %d).", syntax.Offset)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return fmt.Sprintf("%s must be a %s, not a JSON %s.", typeErr.Field, typeErr.Type, typeErr.Value)
	case errors.As(err, &typeErr):
		return fmt.Sprintf("The body must be a JSON object, not a %s.", typeErr.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "The body is cut short: it is not valid JSON."
	default:
		// json: unknown field "x", and the like.
		return fmt.Sprintf("The body could not be read: %v.", err)
	}
}
