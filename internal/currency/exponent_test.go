package currency_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/currency"
)

// One currency or more of each exponent class: zero-decimal, two and
// three decimals (ISO 4217; Stripe's currencies page).
func TestDecimal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code   string
		amount int64
		want   string
		exp    int
	}{
		{"jpy", 5000, "5000", 0}, {"krw", 1, "1", 0}, {"JPY", 50, "50", 0}, {"xof", 0, "0", 0},
		{"usd", 2000, "20.00", 2}, {"eur", 5, "0.05", 2}, {"gbp", 0, "0.00", 2}, {"huf", 17500, "175.00", 2},
		{"kwd", 1500, "1.500", 3}, {"bhd", 5, "0.005", 3}, {"tnd", 123456, "123.456", 3}, {"OMR", 1000, "1.000", 3},
		{"usd", -2050, "-20.50", 2},
	} {
		require.Equal(t, tc.exp, currency.Exponent(tc.code), tc.code)
		require.Equal(t, tc.want, currency.Decimal(tc.code, tc.amount), "%s %d", tc.code, tc.amount)
	}
}
