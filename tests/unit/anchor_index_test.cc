#include <gtest/gtest.h>
#include "injector/anchor_index.h"
