# Finds Stagecraft's dependencies and says what it found. Required: nlohmann/json, Eigen, CLI11,
# SQLite, GoogleTest (tests). Optional, each behind an option that defaults to ON when found:
# MPI (STAGECRAFT_WITH_MPI), CUDA + cuBLAS + NCCL (STAGECRAFT_WITH_CUDA), Qt6 (STAGECRAFT_WITH_GUI).

find_package(nlohmann_json 3.10 REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(CLI11 REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(Threads REQUIRED)

find_package(MPI COMPONENTS CXX QUIET)
find_package(Qt6 COMPONENTS Widgets Charts QUIET)

include(CheckLanguage)
check_language(CUDA)
set(stagecraft_cuda_found OFF)
if(CMAKE_CUDA_COMPILER)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_library(STAGECRAFT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(STAGECRAFT_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(STAGECRAFT_NCCL_LIBRARY AND STAGECRAFT_NCCL_INCLUDE AND TARGET CUDA::cublas)
      set(stagecraft_cuda_found ON)
    endif()
  endif()
endif()

set(stagecraft_qt_found OFF)
if(Qt6Widgets_FOUND AND Qt6Charts_FOUND)
  set(stagecraft_qt_found ON)
endif()

option(STAGECRAFT_WITH_MPI "Build the MPI executor and MPI-sharded search" ${MPI_CXX_FOUND})
option(STAGECRAFT_WITH_CUDA "Build the CUDA/NCCL executor backend" ${stagecraft_cuda_found})
option(STAGECRAFT_WITH_GUI "Build the Qt6 GUI" ${stagecraft_qt_found})

if(STAGECRAFT_WITH_MPI AND NOT MPI_CXX_FOUND)
  message(FATAL_ERROR "STAGECRAFT_WITH_MPI=ON but MPI was not found (run scripts/setup.sh)")
endif()
if(STAGECRAFT_WITH_CUDA AND NOT stagecraft_cuda_found)
  message(FATAL_ERROR "STAGECRAFT_WITH_CUDA=ON but nvcc, cuBLAS or NCCL was not found")
endif()
if(STAGECRAFT_WITH_GUI AND NOT stagecraft_qt_found)
  message(FATAL_ERROR "STAGECRAFT_WITH_GUI=ON but Qt6 Widgets/Charts were not found (run scripts/setup.sh)")
endif()
if(STAGECRAFT_WITH_CUDA)
  # nvcc 13 defaults to sm_75; the backend targets Hopper (H100/H200). Override with
  # -DCMAKE_CUDA_ARCHITECTURES=... (for example "80;90").
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  # NCCL has no CUDA:: target: one imported target here.
  # CMake 3.25.1 knows no flag for the CUDA 20 dialect (3.25.2 added it), and CUDA_STANDARD
  # follows CMAKE_CXX_STANDARD: give it the flag nvcc 12+ takes.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  add_library(Stagecraft::nccl UNKNOWN IMPORTED)
  set_target_properties(Stagecraft::nccl PROPERTIES IMPORTED_LOCATION "${STAGECRAFT_NCCL_LIBRARY}"
                                                    INTERFACE_INCLUDE_DIRECTORIES "${STAGECRAFT_NCCL_INCLUDE}")
endif()

function(stagecraft_report name found enabled detail)
  if(found)
    set(state "found")
  else()
    set(state "missing")
  endif()
  if(enabled)
    set(use "building with it")
  else()
    set(use "building without it")
  endif()
  message(STATUS "stagecraft: ${name}: ${state} (${detail}) - ${use}")
endfunction()

stagecraft_report("nlohmann/json" ON ON "${nlohmann_json_VERSION}")
stagecraft_report("Eigen" ON ON "${Eigen3_VERSION}")
stagecraft_report("CLI11" ON ON "${CLI11_VERSION}")
stagecraft_report("SQLite" ON ON "${SQLite3_VERSION}")
stagecraft_report("MPI" "${MPI_CXX_FOUND}" "${STAGECRAFT_WITH_MPI}" "${MPI_CXX_VERSION}")
stagecraft_report("CUDA/cuBLAS/NCCL" "${stagecraft_cuda_found}" "${STAGECRAFT_WITH_CUDA}"
                  "nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
stagecraft_report("Qt6 Widgets+Charts" "${stagecraft_qt_found}" "${STAGECRAFT_WITH_GUI}" "${Qt6_VERSION}")
