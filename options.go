package leaderelection

import (
	"log/slog"
)

// Option configures a [BlobDistributedMutex] or a [BlobLeaseManager].
type Option func(*options)

type options struct {
	logger *slog.Logger
}

// WithLogger sets where the library logs, through log/slog with key-value
// attributes. It is quiet while all is well: leadership changes at Info,
// failing storage at Warn (rate-limited), a leader func that ignores its
// cancelled context at Error. Default: slog.Default(). Nil discards logs.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		o.logger = l
	}
}

func buildOptions(opts []Option) options {
	o := options{logger: slog.Default()}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}
