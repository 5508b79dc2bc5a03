// A fake tree that follows the layering.
#pragma once
#include <vector>
