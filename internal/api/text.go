package api

import (
	"strings"
	"unicode/utf8"
)

// Text from a client is valid UTF-8 without NUL (API.md section 2), wherever
// it comes from: PostgreSQL stores nothing else in a text column, and what
// encoding/json and url.Query would quietly turn into U+FFFD is not what the
// client sent. It is checked at the edge, once per source: body strings by
// decodeJSON (keys and values).

// checkText refuses invalid UTF-8 and NUL in s; what names s in the answer.
func checkText(s, what string) error {
	if !utf8.ValidString(s) {
		return validationFailed("%s is not valid UTF-8.", what)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return validationFailed("%s holds a NUL character (U+0000).", what)
	}
	return nil
}
