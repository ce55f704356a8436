package keyfilter

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReportFalsePositive_aColdFilterCountsNothing(t *testing.T) {
	t.Parallel()
	f, err := New(Config{ExpectedKeysPerSlice: 1000})
	if err != nil {
		t.Fatal(err)
	}
	f.ReportFalsePositive() // cold: its "maybe" did not come from its bits
	if got := testutil.ToFloat64(f.fps); got != 0 {
		t.Fatalf("cold filter counted %v false positives", got)
	}
	if _, err := f.Rebuild(context.Background(), func(func(Row, error) bool) {}); err != nil {
		t.Fatal(err)
	}
	f.ReportFalsePositive()
	if got := testutil.ToFloat64(f.fps); got != 1 {
		t.Fatalf("ready filter counted %v false positives, want 1", got)
	}
}
