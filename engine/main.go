// Command durabletask-sidecar runs the Dapr workflow engine core
// (github.com/dapr/durabletask-go) as a standalone gRPC sidecar with its SQLite backend.
//
// It is the upstream sidecar's main with three flags added. --lock-timeout: upstream fixes
// the work-item lock at two minutes, so after the engine itself is killed mid-step a
// restarted engine waits two minutes before it re-dispatches the step; crash tests that
// kill the engine set a few seconds instead. --poll-interval and --max-poll-interval: how
// long the SQLite backend waits between two queries for a work item while there is none,
// from the first to the longest wait (5% longer each query). They exist through
// engine/sqlite-poll.patch, which scripts/install-engine.sh applies to the library: unpatched,
// v0.14.0 never waits at all and an idle engine takes more than a core. The defaults here
// (2ms growing to 500ms, reached after about 10 s without work) keep a step's hand-off
// within milliseconds while busy and cost an idle engine 0.7% of a core (22 ticks in 30 s
// on the 2-core machine; 100ms cost 2.3%, 1s 0.6%). Every other line of behaviour is the
// library's own.
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
	poll := flag.Duration("poll-interval", 2*time.Millisecond, "The first wait between two queries for work")
	maxPoll := flag.Duration("max-poll-interval", 500*time.Millisecond, "The longest wait between two queries for work")
	flag.Parse()

	logger := backend.DefaultLogger()
	opts := sqlite.NewSqliteOptions(*db)
	opts.WorkflowLockTimeout = *lock
	opts.ActivityLockTimeout = *lock
	opts.PollInterval = *poll
	opts.MaxPollInterval = *maxPoll
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
