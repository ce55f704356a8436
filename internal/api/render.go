package api

import (
	"encoding/json"
	"net/http"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	encodeJSON(w, v)
}

// encodeJSON writes v without HTML escaping: these are API responses, never
// pages, and "<key>" should read as it was written.
func encodeJSON(w http.ResponseWriter, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// listJSON is a page of a list, as Stripe shapes it.
type listJSON[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}

func toList[T any](data []T, hasMore bool) listJSON[T] {
	return listJSON[T]{Object: "list", Data: data, HasMore: hasMore}
}
