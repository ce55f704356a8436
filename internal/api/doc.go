// Package api is the HTTP face of the service: the chi router, the
// middleware every request passes (request id and logging, metrics, panic
// recovery, authentication, JSON body rules), the handlers, and the one
// place where errors become problem+json responses with a stable code.
//
// Handlers stay thin: they decode and validate input, call the package that
// owns the concept (users, payments), and render what it returns. They never
// run SQL of their own.
package api
