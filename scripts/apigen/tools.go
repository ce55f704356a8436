//go:build tools

// Package apigen pins, in its go.mod, the client generators that
// scripts/api-generators.sh runs on the OpenAPI document (ogen and
// oapi-codegen, as `go tool` tools), and the packages their generated code
// imports, so that the generated clients build against the versions the
// generators were made for. Nothing imports it; this file only keeps those
// packages in go.mod and go.sum (`go mod tidy` would drop them otherwise).
package apigen

import (
	// What ogen's generated code imports.
	_ "github.com/go-faster/errors"
	_ "github.com/go-faster/jx"
	_ "github.com/ogen-go/ogen/conv"
	_ "github.com/ogen-go/ogen/http"
	_ "github.com/ogen-go/ogen/json"
	_ "github.com/ogen-go/ogen/middleware"
	_ "github.com/ogen-go/ogen/ogenerrors"
	_ "github.com/ogen-go/ogen/ogenregex"
	_ "github.com/ogen-go/ogen/otelogen"
	_ "github.com/ogen-go/ogen/uri"
	_ "github.com/ogen-go/ogen/validate"
	_ "go.opentelemetry.io/otel"
	_ "go.opentelemetry.io/otel/attribute"
	_ "go.opentelemetry.io/otel/codes"
	_ "go.opentelemetry.io/otel/metric"
	_ "go.opentelemetry.io/otel/semconv/v1.39.0"
	_ "go.opentelemetry.io/otel/trace"

	// What oapi-codegen's generated client imports.
	_ "github.com/oapi-codegen/runtime"
)
