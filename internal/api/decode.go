package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
// fields, trailing data and wrong types are 400 validation_failed. An empty
// body decodes as {} when allowEmpty is set.
func decodeJSON(body []byte, dst any, allowEmpty bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return validationFailed("The request needs a JSON body.")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return validationFailed("%s", describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return validationFailed("The body must hold exactly one JSON object.")
	}
	return nil
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
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "The body is cut short: it is not valid JSON."
	default:
		// json: unknown field "x", and the like.
		return fmt.Sprintf("The body could not be read: %v.", err)
	}
}
