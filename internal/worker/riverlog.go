package worker

import (
	"context"
	"log/slog"
	"strings"
)

// quietRiver is River's logger: the service's, with River's periodic
// "<queue>: Producer job counts" line (river's producer.go logs it at info
// every few seconds while jobs run) lowered to debug, so that it does not
// scroll `payments dev`'s banner away. Every other line of River's keeps its
// level.
type quietRiver struct{ slog.Handler }

// riverChatter is the end of the message quietRiver lowers.
const riverChatter = ": Producer job counts"

func (h quietRiver) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && strings.HasSuffix(r.Message, riverChatter) {
		r.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, r.Level) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietRiver) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietRiver{h.Handler.WithAttrs(attrs)}
}

func (h quietRiver) WithGroup(name string) slog.Handler {
	return quietRiver{h.Handler.WithGroup(name)}
}
