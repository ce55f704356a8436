// Package doccheck holds the repository's documents to the code: every
// identifier the README and docs/ put in backticks in the shape of Go code
// (a test's name, a function, a type, a method) exists in a file the
// repository tracks. A document that cites a name the code does not have
// (a function renamed, a test never written) fails `make test`. It has no
// code of its own: see doccheck_test.go.
package doccheck
