// Command durabletask-sidecar runs the Dapr workflow engine core
// (github.com/dapr/durabletask-go) as a standalone gRPC sidecar with its SQLite backend.
//
// It is the upstream sidecar's main with one addition: --lock-timeout. Upstream fixes the
// work-item lock at two minutes, so after the engine itself is killed mid-step a restarted
// engine waits two minutes before it re-dispatches the step. Crash tests that kill the
// engine set a few seconds instead. Every other line of behaviour is the library's own.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/dapr/durabletask-go/backend"
	"github.com/dapr/durabletask-go/backend/sqlite"
)

func main() {
	port := flag.Int("port", 4001, "The server port")
	host := flag.String("host", "localhost", "The host to bind to")
	db := flag.String("db", "", "The path to the sqlite file to use (or create if not exists)")
	lock := flag.Duration("lock-timeout", 2*time.Minute, "How long a dispatched work item stays locked")
	flag.Parse()

	logger := backend.DefaultLogger()
	opts := sqlite.NewSqliteOptions(*db)
	opts.WorkflowLockTimeout = *lock
	opts.ActivityLockTimeout = *lock
	be := sqlite.NewSqliteBackend(opts, logger)

	server := grpc.NewServer()
	executor, register := backend.NewGrpcExecutor(be, logger)
	register(server)
	wf := backend.NewWorkflowWorker(backend.WorkflowWorkerOptions{
		Backend: be, Executor: executor, Logger: logger, AppID: "histaudit",
	})
	act := backend.NewActivityTaskWorker(be, executor, logger)
	worker := backend.NewTaskHubWorker(be, wf, act, logger)
	if err := worker.Start(context.Background()); err != nil {
		log.Fatalf("failed to start worker: %v", err)
	}

	lis, err := net.Listen("tcp", fmt.Sprintf("%s:%d", *host, *port))
	if err != nil {
		log.Fatalf("failed to listen: %v", err)
	}
	fmt.Printf("server listening at %v\n", lis.Addr())
	if err := server.Serve(lis); err != nil {
		log.Fatalf("failed to serve: %v", err)
	}
}
