package currency

import (
	"fmt"
	"strings"
)

// threeDecimal are the currencies whose minor unit is a thousandth: ISO
// 4217 gives BHD, JOD, KWD, OMR and TND (and IQD, LYD, which Stripe does
// not charge in) a minor-unit exponent of 3, and Stripe's "Three-decimal
// currencies" (https://docs.stripe.com/currencies#three-decimal) counts
// their API amounts in thousandths: 5.124 KWD is 5124. The service does not
// charge in them (see supported), but an amount it is handed in one is
// written correctly all the same.
var threeDecimal = map[string]bool{"bhd": true, "jod": true, "kwd": true, "omr": true, "tnd": true}

// Exponent is how many decimal digits the minor unit of the lower-case
// currency code has, as Stripe's API counts amounts in it: 0 for the
// zero-decimal currencies (https://docs.stripe.com/currencies#zero-decimal:
// jpy 5000 is ¥5000), 3 for the three-decimal ones, 2 for every other
// (ISO 4217's minor unit, save where Stripe keeps two decimals for
// backwards compatibility, as for isk, huf and twd, whose amounts Stripe
// still counts in hundredths).
func Exponent(code string) int {
	code = strings.ToLower(code)
	switch {
	case zeroDecimal[code]:
		return 0
	case threeDecimal[code]:
		return 3
	}
	return 2
}

// Decimal writes amount minor units of the currency code in major units,
// with as many decimals as the currency's Exponent: "20.00" (usd 2000),
// "5000" (jpy 5000), "1.500" (kwd 1500).
func Decimal(code string, amount int64) string {
	exp := Exponent(code)
	sign, abs := "", uint64(amount)
	if amount < 0 {
		sign, abs = "-", uint64(-amount) // -MinInt64 wraps to itself, which uint64 reads right
	}
	if exp == 0 {
		return fmt.Sprintf("%s%d", sign, abs)
	}
	unit := uint64(1)
	for range exp {
		unit *= 10
	}
	return fmt.Sprintf("%s%d.%0*d", sign, abs/unit, exp, abs%unit)
}
