#!/usr/bin/env bash
# Starts local PostgreSQL and RabbitMQ when they are not running, and waits until both answer.
# Used by .ci/run; harmless to run by hand.
set -euo pipefail

if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
for _ in $(seq 1 60); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
pg_isready -h 127.0.0.1 -p 5432 || { echo "services: PostgreSQL did not come up" >&2; exit 1; }

if ! rabbitmq-diagnostics -q ping >/dev/null 2>&1; then
  echo "services: starting RabbitMQ"
  rabbitmq-server -detached || true
fi
for _ in $(seq 1 90); do rabbitmq-diagnostics -q ping >/dev/null 2>&1 && break; sleep 1; done
rabbitmq-diagnostics -q ping >/dev/null 2>&1 || { echo "services: RabbitMQ did not come up" >&2; exit 1; }
# The node may answer ping before the AMQP listener accepts connections.
for _ in $(seq 1 60); do (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && break; sleep 1; done
echo "services: PostgreSQL and RabbitMQ are up"
