package console

import "testing"

// Issue 42, item 8: the console wrote amounts in minor units ("2000 USD"
// for $20.00). One function writes every amount, in major units, with the
// currency's exponent (none for jpy, three decimals for kwd) and symbol.
func TestFormatMoney(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		amount int64
		code   string
		want   string
	}{
		{2000, "usd", "$20.00"},
		{2000, "USD", "$20.00"},
		{5, "usd", "$0.05"},
		{0, "usd", "$0.00"},
		{99999999, "usd", "$999,999.99"},
		{123456, "eur", "€1,234.56"},
		{-123456, "eur", "-€1,234.56"},
		{30, "gbp", "£0.30"},
		{2000, "jpy", "¥2,000"},
		{50, "jpy", "¥50"},
		{99999999, "jpy", "¥99,999,999"},
		{1500, "cad", "CA$15.00"},
		{1250, "chf", "12.50 CHF"},
		{5124, "kwd", "5.124 KWD"},
		{100000, "krw", "₩100,000"},
		{1000000, "xyz", "10,000.00 XYZ"},
	} {
		if got := formatMoney(tt.amount, tt.code); got != tt.want {
			t.Errorf("formatMoney(%d, %q) = %q, want %q", tt.amount, tt.code, got, tt.want)
		}
	}
}
