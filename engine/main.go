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
// library's own, but one: at start the engine releases the work-item locks left in its
// database by the process before it (--release-locks, on by default). A standalone sidecar
// owns its database file, so a lock it finds at start was taken by a process that is gone;
// upstream waits for it to expire, during which the interrupted step is stuck and the old
// worker's late result is rejected anyway. Released, the step is dispatched again as soon
// as the restarted engine polls.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"strings"
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
	release := flag.Bool("release-locks", true, "Release the work-item locks an earlier process left in --db")
	flag.Parse()

	if *release && *db != "" {
		if n, err := releaseLocks(*db); err != nil {
			log.Fatalf("failed to release the locks left in %s: %v", *db, err)
		} else if n > 0 {
			fmt.Printf("released %d work-item locks an earlier process held\n", n)
		}
	}

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

// releaseLocks clears the locks on workflow instances and activity tasks in the SQLite
// database at path (the backend's own schema, backend/sqlite/schema.sql of the pinned tag):
// what the backend does when a lock expires, done at once. A new or empty file has nothing
// to release.
func releaseLocks(path string) (int64, error) {
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return 0, nil
	}
	dsn := path
	if !strings.HasPrefix(dsn, "file:") {
		dsn = "file:" + dsn
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var total int64
	for _, table := range []string{"Instances", "NewTasks"} {
		res, err := db.Exec("UPDATE " + table + " SET [LockedBy] = NULL, [LockExpiration] = NULL WHERE [LockedBy] IS NOT NULL")
		if err != nil {
			if strings.Contains(err.Error(), "no such table") {
				return total, nil
			}
			return total, err
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}
