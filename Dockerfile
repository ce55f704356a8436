# syntax=docker/dockerfile:1
# The payments binary in a small image that runs as a non-root user.
# Every subcommand is in it: serve, worker, migrate, stripesim, users, healthcheck.

# Build: a static binary (the service needs no cgo).
# The toolchain go.mod names (its `go` line), so the image builds what CI tests.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/payments ./cmd/payments

# Run: distroless, no shell, no package manager, user 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/payments /usr/local/bin/payments
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/payments"]
CMD ["serve", "--addr", "0.0.0.0:8080"]
