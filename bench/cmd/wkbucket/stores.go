//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/wasmkeep/wasmkeep/bench/measure"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
	s3bucket "github.com/wasmkeep/wasmkeep/plugins/bucket-s3"
	"github.com/wasmkeep/wasmkeep/plugins/bucket-s3/s3test"
)

// A store is where a node keeps its actors' history: none (a node alone,
// "local"), bucket-fs on a directory, or bucket-s3 on a local S3 server
// (VersityGW, "s3", or MinIO, "minio") over loopback. Each use takes a
// prefix of its own, so that no run sees another's history or node lease.
type store struct {
	kind string
	// url is serve's --bucket for prefix ("" for local).
	url func(prefix string) string
	// env is added to the server's environment (the AWS_* variables).
	env []string
	// open opens the bucket under prefix in this process, to count and
	// list what the node wrote.
	open func(prefix string) (bucket.Bucket, error)
	stop func()
}

// openStore starts what kind needs, its files under dir.
func openStore(kind, dir string) (*store, error) {
	switch kind {
	case "local":
		return &store{kind: kind, url: func(string) string { return "" }, stop: func() {}}, nil
	case "fs":
		root := filepath.Join(dir, "bucket-fs")
		return &store{
			kind: kind,
			url:  func(prefix string) string { return "file://" + filepath.Join(root, prefix) },
			open: func(prefix string) (bucket.Bucket, error) { return fsbucket.Open(filepath.Join(root, prefix)) },
			stop: func() {},
		}, nil
	case "s3":
		gw, err := s3test.StartServer(filepath.Join(dir, "versitygw"))
		if err != nil {
			return nil, err
		}
		name, err := gw.CreateBucket(context.Background())
		if err != nil {
			gw.Stop()
			return nil, err
		}
		return s3Store(kind, name, gw.Endpoint, gw.AccessKey, gw.SecretKey, gw.Stop), nil
	case "minio":
		return startMinIO(filepath.Join(dir, "minio"))
	}
	return nil, fmt.Errorf("store %q: want local, fs, s3 (VersityGW) or minio", kind)
}

// s3Store is bucket-s3 on bucketName at endpoint (http, loopback).
func s3Store(kind, bucketName, endpoint, access, secret string, stop func()) *store {
	return &store{
		kind: kind,
		url:  func(prefix string) string { return "s3://" + bucketName + "/" + prefix },
		env: []string{
			"AWS_ACCESS_KEY_ID=" + access, "AWS_SECRET_ACCESS_KEY=" + secret,
			"AWS_REGION=" + s3test.Region, "AWS_ENDPOINT=" + endpoint, "AWS_ALLOW_HTTP=true",
		},
		open: func(prefix string) (bucket.Bucket, error) {
			cfg := s3bucket.NewConfig()
			cfg.Bucket, cfg.Prefix, cfg.Endpoint, cfg.Region, cfg.AllowHTTP = bucketName, prefix, endpoint, s3test.Region, true
			cfg.Credentials = credentials.NewStaticCredentialsProvider(access, secret, "")
			return s3bucket.New(cfg)
		},
		stop: stop,
	}
}

// startMinIO runs `minio server` (go install github.com/minio/minio@latest)
// on a free loopback port over dir, its console off, and creates a bucket.
func startMinIO(dir string) (*store, error) {
	bin, err := exec.LookPath("minio")
	if err != nil {
		return nil, errors.New("minio is not in PATH: go install github.com/minio/minio@latest, then PATH=$(go env GOPATH)/bin:$PATH")
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o750); err != nil {
		return nil, err
	}
	addr, err := measure.FreeAddr()
	if err != nil {
		return nil, err
	}
	console, err := measure.FreeAddr()
	if err != nil {
		return nil, err
	}
	const access, secret = "wasmkeep-bench", "wasmkeep-bench-secret"
	logf, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", console, filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+access, "MINIO_ROOT_PASSWORD="+secret, "MINIO_BROWSER=off")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	endpoint := "http://" + addr
	client := s3.New(s3.Options{
		Region: s3test.Region, BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(access, secret, ""),
	})
	var r [4]byte
	rand.Read(r[:])
	name := "wasmkeep-bench-" + hex.EncodeToString(r[:])
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
		cancel()
		if err == nil {
			break
		}
		select {
		case <-done:
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("minio exited at start (%v):\n%s", cmd.ProcessState, log)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("minio at %s: creating a bucket: %w", endpoint, err)
		}
	}
	return s3Store("minio", name, endpoint, access, secret, stop), nil
}
