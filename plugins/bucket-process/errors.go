package processbucket

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/plugins/bucket-process/internal/bucketpb"
)

// kinds are the errors that cross the boundary as themselves: the
// provider lists each one its error matches, and the host's error matches
// them again. The status code is for other gRPC tools; the host reads the
// kinds. A new contract error is one more line here and in bucket.proto.
var kinds = []struct {
	kind bucketpb.Kind
	err  error
	code codes.Code
}{
	{bucketpb.Kind_KIND_NOT_FOUND, bucket.ErrNotFound, codes.NotFound},
	{bucketpb.Kind_KIND_PRECONDITION, bucket.ErrPrecondition, codes.FailedPrecondition},
	{bucketpb.Kind_KIND_TRANSIENT, bucket.ErrTransient, codes.Unavailable},
	{bucketpb.Kind_KIND_RANGE, bucket.ErrRange, codes.OutOfRange},
	{bucketpb.Kind_KIND_INVALID_KEY, bucket.ErrInvalidKey, codes.InvalidArgument},
	{bucketpb.Kind_KIND_CANCELED, context.Canceled, codes.Canceled},
	{bucketpb.Kind_KIND_DEADLINE, context.DeadlineExceeded, codes.DeadlineExceeded},
}

// toStatus is the provider's side: err as a gRPC status whose details
// carry a Failure, marking it as the provider's own.
func toStatus(err error) error {
	code := codes.Unknown
	f := &bucketpb.Failure{}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			if len(f.Kinds) == 0 {
				code = k.code
			}
			f.Kinds = append(f.Kinds, k.kind)
		}
	}
	st, derr := status.New(code, err.Error()).WithDetails(f)
	if derr != nil {
		return status.Error(codes.Internal, "encoding the error "+err.Error()+": "+derr.Error())
	}
	return st.Err()
}

// providerError is an error the provider returned, as the host sees it.
type providerError struct {
	prefix, msg string
	kinds       []error
}

func (e *providerError) Error() string   { return e.prefix + ": " + e.msg }
func (e *providerError) Unwrap() []error { return e.kinds }

// fromStatus is the host's side: the provider's error if err is a status
// toStatus made, else nil (the connection failed, not the provider).
func fromStatus(prefix string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		f, ok := d.(*bucketpb.Failure)
		if !ok {
			continue
		}
		e := &providerError{prefix: prefix, msg: st.Message()}
		for _, kind := range f.Kinds {
			for _, k := range kinds {
				if k.kind == kind {
					e.kinds = append(e.kinds, k.err)
				}
			}
		}
		return e
	}
	return nil
}
