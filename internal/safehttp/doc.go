// Package safehttp is the HTTP client that delivers webhooks to merchants,
// and the check of a webhook URL when an endpoint is created.
//
// A webhook URL is chosen by a user of the API, and the service then makes
// requests to it from inside its own network: without care, that is a
// server-side request forgery (SSRF) service, which a user points at the
// cloud metadata address, an admin port on loopback or a database on the
// private network. So, unless private addresses are allowed (`payments dev`,
// or PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true):
//
//   - CheckURL refuses, at creation, a URL that is not absolute http(s), has
//     user information or is longer than 2048 characters, and a host that is,
//     or resolves to, any non-public address. Its errors wrap ErrInvalidURL
//     and read as a 400 validation_failed detail, which never tells what a
//     host name resolved to (docs/API.md section 7): that would map the
//     service's network for whoever asks.
//   - NewClient's dialer refuses every non-public address again when it
//     connects, in net.Dialer.Control, which sees the address actually
//     dialled. The check at creation alone would not do: a DNS answer can
//     change between creation and delivery (DNS rebinding), and every
//     delivery resolves the name again. Its errors wrap ErrNonPublicAddress
//     and say what kind of address was refused but not which; Describe
//     words them, and the client's other errors, for a delivery's record,
//     which never names the resolver or an address the URL does not hold,
//     and reads the same whether a name did not resolve or was refused.
//
// Even where private addresses are allowed, both refuse the addresses of the
// service itself (Config.Own: in `payments dev`, its API and its Stripe
// simulator), so that an endpoint cannot make the service call its own
// simulator's /_sim/reset or its own API.
//
// The client also never follows a redirect (a 3xx is the endpoint's answer,
// not an instruction to fetch another URL, which would be SSRF again by a
// second route), takes no proxy from the environment (the proxy, not this
// dialer, would connect), times out (10 s by default: docs/API.md section 7's
// "answered within 10 s"), and names itself in User-Agent. ReadLimited
// reads at most a small part of an answer, for a delivery's record: a
// receiver cannot make the worker read, or store, megabytes.
//
// The package must never allow a non-public address unless told to, and
// never decide what a delivery means: signing, retries and records are the
// delivery worker's.
package safehttp
