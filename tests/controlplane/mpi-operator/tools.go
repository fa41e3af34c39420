//go:build tools

// Package mpioperator only pins the command build-mpi-operator.sh compiles; nothing imports it.
package mpioperator

import (
	_ "github.com/kubeflow/mpi-operator/cmd/mpi-operator"
)
