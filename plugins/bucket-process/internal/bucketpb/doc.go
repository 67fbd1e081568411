// Package bucketpb is the generated code of bucket.proto, the bucket
// provider protocol. Regenerate it after editing bucket.proto (see the
// package README for the tools):
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative bucket.proto
package bucketpb
