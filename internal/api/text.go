package api

import (
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/example/payments/internal/problem"
)

// Text from a client is valid UTF-8 without NUL (API.md section 2), wherever
// it comes from: PostgreSQL takes nothing else as text (a query with it
// failed, and the client got a 500), and what encoding/json would quietly
// turn into U+FFFD is not what the client sent. It is checked at the edge,
// once per source: body strings by decodeJSON (keys and values), query
// parameters by checkQuery, path parameters by pathParam.

// isText reports whether s is valid UTF-8 without NUL.
func isText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

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

// checkQuery answers 400 validation_failed for a query string that does not
// parse (a bad %-escape, a semicolon) or holds a name or value that is not
// text, before any handler reads it: handlers read r.URL.Query(), which
// drops what does not parse.
func checkQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := queryProblem(r.URL.RawQuery); err != nil {
			problem.Write(w, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func queryProblem(rawQuery string) *problem.Problem {
	if rawQuery == "" {
		return nil
	}
	values, err := url.ParseQuery(rawQuery)
	if err != nil {
		return validationFailed("The query string does not parse: %v.", err)
	}
	for name, vs := range values {
		if !isText(name) {
			return validationFailed("A query parameter's name is not valid UTF-8 or holds a NUL character.")
		}
		for _, v := range vs {
			if !isText(v) {
				return validationFailed("The query parameter %q is not valid UTF-8 or holds a NUL character.", name)
			}
		}
	}
	return nil
}

// pathParam returns the path parameter name, unescaped, and whether it is
// text that can name something. Every parameter of a route is an id, and an
// id that is not text names nothing: its route answers 404, as for any id
// that does not exist.
//
// chi routes on r.URL.RawPath when it is set, that is when the path holds
// escapes its decoded form cannot reproduce (an idempotency key holding "/"
// arrives as %2F), and its parameters are then still escaped.
func pathParam(r *http.Request, name string) (string, bool) {
	param := chi.URLParam(r, name)
	if r.URL.RawPath != "" {
		unescaped, err := url.PathUnescape(param)
		if err != nil {
			return "", false
		}
		param = unescaped
	}
	return param, isText(param)
}
