// Package currency is the one table of the currencies Stripe charges in,
// with each one's minor unit and minimum charge amount. The API reads it to
// refuse, before any work, a payment Stripe would refuse; the Stripe
// simulator reads it to refuse that payment as Stripe does. Keeping one
// table keeps the two in step. It knows nothing of payments or HTTP.
package currency

import (
	"errors"
	"fmt"
)

// MaxCharge is the largest amount, in minor units, of a charge: Stripe's
// amount has at most eight digits.
const MaxCharge = 99999999

// Currency is a currency Stripe charges in.
type Currency struct {
	Code string // lower-case ISO 4217, as Stripe's API spells it
	// ZeroDecimal: the currency has no minor unit, so an amount counts whole
	// units (jpy 500 is ¥500). Amounts are integers either way.
	ZeroDecimal bool
	// MinCharge is Stripe's published minimum charge, in minor units; 1
	// for a currency Stripe publishes none for (see minimums).
	MinCharge int64
}

// The errors CheckCharge returns.
var (
	ErrUnsupported    = errors.New("currency not supported")
	ErrAmountTooSmall = errors.New("amount under the minimum charge")
	ErrAmountTooLarge = errors.New("amount over the maximum charge")
)

// Lookup returns the currency with that lower-case code, if Stripe charges
// in it.
func Lookup(code string) (Currency, bool) {
	if !supported[code] {
		return Currency{}, false
	}
	c := Currency{Code: code, ZeroDecimal: zeroDecimal[code], MinCharge: 1}
	if m, ok := minimums[code]; ok {
		c.MinCharge = m
	}
	return c, true
}

// CheckCharge tells whether Stripe accepts a charge of amount minor units in
// the currency code: nil, or an error wrapping ErrUnsupported,
// ErrAmountTooSmall or ErrAmountTooLarge whose text says what is allowed.
func CheckCharge(code string, amount int64) error {
	c, ok := Lookup(code)
	switch {
	case !ok:
		return fmt.Errorf("%w: %q is not a currency Stripe charges in (a lower-case ISO 4217 code such as \"usd\")", ErrUnsupported, code)
	case amount < c.MinCharge:
		return fmt.Errorf("%w: a charge in %s is at least %s (%d), not %d", ErrAmountTooSmall, code, c.Format(c.MinCharge), c.MinCharge, amount)
	case amount > MaxCharge:
		return fmt.Errorf("%w: a charge is at most %d, not %d", ErrAmountTooLarge, MaxCharge, amount)
	}
	return nil
}

// Format writes amount minor units in major units with the code, such as
// "0.50 usd" or "50 jpy".
func (c Currency) Format(amount int64) string {
	if c.ZeroDecimal {
		return fmt.Sprintf("%d %s", amount, c.Code)
	}
	return fmt.Sprintf("%d.%02d %s", amount/100, amount%100, c.Code)
}
