package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/client/webhook"
)

const (
	secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // base64 of 24 bytes
	other  = "whsec_c2VjcmV0LW9mLWFub3RoZXItZW5kcG9pbnQ="
)

var (
	now   = time.Unix(1_763_800_000, 0)
	event = []byte(`{"id":"evt_1","object":"event","type":"payment.succeeded","data":{"object":{"id":"pay_1"}},"created":1763800000}`)
)

// serviceSigned is a delivery signed as the service signs its own: its
// delivery worker (internal/merchanthooks) signs with the Standard
// Webhooks library's Sign.
func serviceSigned(t *testing.T, secret string, at time.Time, body []byte) http.Header {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	signature, err := wh.Sign("evt_1", at, body)
	require.NoError(t, err)
	return http.Header{
		"Webhook-Id": {"evt_1"}, "Webhook-Timestamp": {strconv.FormatInt(at.Unix(), 10)}, "Webhook-Signature": {signature},
	}
}

// independentlySigned computes the signature from the specification, with
// nothing but crypto/hmac and base64.
func independentlySigned(secret, id string, at time.Time, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	if err != nil {
		panic(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(at.Unix(), 10) + "." + string(body)))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func TestVerify_theServicesSignatureVerifies(t *testing.T) {
	t.Parallel()
	h := serviceSigned(t, secret, now, event)
	require.NoError(t, webhook.VerifyAt(secret, h, event, 0, now))
	require.Equal(t, independentlySigned(secret, "evt_1", now, event), h.Get("webhook-signature"),
		"the service signs what the specification says")

	h.Set("webhook-signature", independentlySigned(secret, "evt_1", now, event))
	require.NoError(t, webhook.VerifyAt(secret, h, event, 0, now))
}

func TestVerify_refusesWhatTheSecretDidNotSign(t *testing.T) {
	t.Parallel()
	tampered := append([]byte(nil), event...)
	tampered[len(tampered)-2]++
	for name, tc := range map[string]struct {
		secret string
		header func(http.Header)
		body   []byte
		want   error
	}{
		"another secret":   {secret: other, body: event, want: webhook.ErrSignature},
		"a tampered body":  {secret: secret, body: tampered, want: webhook.ErrSignature},
		"another event id": {secret: secret, body: event, header: func(h http.Header) { h.Set("webhook-id", "evt_2") }, want: webhook.ErrSignature},
		"a moved timestamp": {secret: secret, body: event, want: webhook.ErrSignature,
			header: func(h http.Header) { h.Set("webhook-timestamp", strconv.FormatInt(now.Unix()+1, 10)) }},
		"a v1a signature only": {secret: secret, body: event, want: webhook.ErrSignature,
			header: func(h http.Header) { h.Set("webhook-signature", "v1a,"+h.Get("webhook-signature")[3:]) }},
		"no signature":               {secret: secret, body: event, header: func(h http.Header) { h.Del("webhook-signature") }, want: webhook.ErrMissingHeaders},
		"no id":                      {secret: secret, body: event, header: func(h http.Header) { h.Del("webhook-id") }, want: webhook.ErrMissingHeaders},
		"a timestamp not an integer": {secret: secret, body: event, header: func(h http.Header) { h.Set("webhook-timestamp", "+"+h.Get("webhook-timestamp")) }, want: webhook.ErrTimestamp},
		"a secret not base64":        {secret: "whsec_!!", body: event, want: webhook.ErrSecret},
		"an empty secret":            {secret: "", body: event, want: webhook.ErrSecret},
	} {
		t.Run(name, func(t *testing.T) {
			h := serviceSigned(t, secret, now, event)
			if tc.header != nil {
				tc.header(h)
			}
			require.ErrorIs(t, webhook.VerifyAt(tc.secret, h, tc.body, 0, now), tc.want)
		})
	}
}

// During a rotation the header carries several signatures, space
// separated: one that matches is enough.
func TestVerify_oneOfSeveralSignatures(t *testing.T) {
	t.Parallel()
	h := serviceSigned(t, secret, now, event)
	h.Set("webhook-signature", independentlySigned(other, "evt_1", now, event)+" v1a,bm90LWhtYWM= "+h.Get("webhook-signature"))
	require.NoError(t, webhook.VerifyAt(secret, h, event, 0, now))
	require.NoError(t, webhook.VerifyAt(other, h, event, 0, now))
}

// The timestamp is within the tolerance, either way: five minutes by
// default, or the caller's.
func TestVerify_timestampTolerance(t *testing.T) {
	t.Parallel()
	require.Equal(t, 5*time.Minute, webhook.DefaultTolerance)
	for _, tc := range []struct {
		sent      time.Duration // from now
		tolerance time.Duration
		ok        bool
	}{
		{-5 * time.Minute, 0, true},
		{-5*time.Minute - time.Second, 0, false},
		{5 * time.Minute, 0, true},
		{5*time.Minute + time.Second, 0, false},
		{-time.Hour, 2 * time.Hour, true},
		{-31 * time.Second, 30 * time.Second, false},
	} {
		at := now.Add(tc.sent)
		h := serviceSigned(t, secret, at, event)
		err := webhook.VerifyAt(secret, h, event, tc.tolerance, now)
		if tc.ok {
			require.NoError(t, err, "sent %v from now, tolerance %v", tc.sent, tc.tolerance)
		} else {
			require.ErrorIs(t, err, webhook.ErrTimestamp, "sent %v from now, tolerance %v", tc.sent, tc.tolerance)
		}
	}
	// Verify itself reads the clock.
	require.NoError(t, webhook.Verify(secret, serviceSigned(t, secret, time.Now(), event), event, 0))
	require.ErrorIs(t, webhook.Verify(secret, serviceSigned(t, secret, time.Now().Add(-time.Hour), event), event, 0), webhook.ErrTimestamp)
}

func TestParseEvent(t *testing.T) {
	t.Parallel()
	h := serviceSigned(t, secret, time.Now(), event)
	e, err := webhook.ParseEvent(secret, h, event, 0)
	require.NoError(t, err)
	require.Equal(t, "evt_1", e.ID)
	require.Equal(t, "payment.succeeded", e.Type)
	p, err := e.Payment()
	require.NoError(t, err)
	require.Equal(t, "pay_1", p.ID)

	_, err = webhook.ParseEvent(other, h, event, 0)
	require.ErrorIs(t, err, webhook.ErrSignature)

	// Signed, but not the event the webhook-id names.
	body := []byte(`{"id":"evt_9","object":"event","type":"payment.succeeded","data":{"object":{}},"created":1}`)
	_, err = webhook.ParseEvent(secret, serviceSigned(t, secret, time.Now(), body), body, 0)
	require.ErrorContains(t, err, "is not the event's id")
}

// A made-up header never verifies, nor panics: the fuzzer does not know
// the secret.
func FuzzVerify(f *testing.F) {
	f.Add("evt_1", strconv.FormatInt(now.Unix(), 10), "v1,AAAA", event)
	f.Add("", "", "", []byte{})
	f.Add("a.b", "1763800000", "v1, v1a,x v1,", []byte("{}"))
	f.Fuzz(func(t *testing.T, id, ts, signature string, body []byte) {
		h := http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {signature}}
		if err := webhook.VerifyAt(secret, h, body, time.Hour, now); err == nil {
			t.Fatalf("a made-up delivery verified: %v", h)
		}
	})
}
