package api

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 document of every route the service
// answers (API.md section 8), served at GET /openapi.json.
//
// It is written by hand and embedded, rather than generated from the
// handlers: the document is the contract a reader and another language's
// client generator start from, so it is kept as one readable file, with the
// descriptions a generator cannot guess. It cannot drift from the code
// because the tests hold the code to it: internal/openapitest validates
// every request and response of the api and cmd/payments tests against this
// very file, and TestOpenAPI_listsEveryRoute compares its paths with the
// router's.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the OpenAPI document (a copy: callers may not
// change the one served).
func OpenAPIDocument() []byte {
	return append([]byte(nil), openAPIDocument...)
}

// serveOpenAPI answers GET /openapi.json. It needs no API key: the document
// describes the API, and holds nothing of any user.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}
