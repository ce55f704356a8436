package webhooks

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/example/payments/internal/stripesim"
)

// FuzzVerify checks the signature check: an arbitrary header never
// verifies (nor panics), a delivery signed with the secret verifies only
// with its exact payload, and one signed with another secret never does.
func FuzzVerify(f *testing.F) {
	const secret = "whsec_fuzz"
	event := []byte(`{"id":"evt_1","object":"event","api_version":"2023-10-16","created":1,"type":"x","data":{"object":{}}}`)
	f.Add(event, "t=1,v1=00", byte(0))
	f.Add([]byte(`{}`), "", byte(7))
	f.Add(event, "v1=,t=,v0=abc", byte(255))
	r := NewReceiver(Config{Secret: secret})
	f.Fuzz(func(t *testing.T, payload []byte, header string, flip byte) {
		// The fuzzer never sees the secret: a header it makes up verifying
		// would be a forged HMAC.
		if err := r.verify(payload, header); err == nil {
			t.Fatalf("made-up header %q verified", header)
		}
		signed := stripesim.Sign(payload, secret, time.Now())
		if err := r.verify(payload, stripesim.Sign(payload, "whsec_other", time.Now())); !errors.Is(err, ErrSignature) {
			t.Fatalf("a signature with another secret verified: %v", err)
		}
		if len(payload) > 0 {
			tampered := bytes.Clone(payload)
			tampered[int(flip)%len(tampered)] ^= 0x01
			if err := r.verify(tampered, signed); !errors.Is(err, ErrSignature) {
				t.Fatalf("a tampered payload verified: %v", err)
			}
		}
		err := r.verify(payload, signed)
		if err != nil && !errors.Is(err, ErrSignature) {
			t.Fatalf("verify returned a foreign error: %v", err)
		}
	})
}
