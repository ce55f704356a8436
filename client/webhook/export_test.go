package webhook

import (
	"net/http"
	"time"
)

// VerifyAt is Verify with now as the receiver's clock.
func VerifyAt(secret string, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	return verifyAt(secret, header, body, tolerance, now)
}
