// ksim_gl.h - a headless GLUT/OpenGL for the launch capture (the GL/, GLUT/ and cuda_gl_interop.h stand-ins of
// host_headers.py include it, after ksim_host.h).
//
// Programs that show a result with GLUT (CUDA by Example's cpu_bitmap.h/cpu_anim.h, most visual samples) run without
// a display: the GL calls a display callback makes draw nothing, and glutMainLoop calls the registered reshape and
// display callbacks once and the idle callback (and timers) a couple of times, enough to reach launches made only
// from them, then ends the program normally (exit(0): atexit handlers run, output is flushed). A note of the
// capture says the display was not shown.
// OpenGL buffer objects are host allocations of their glBufferData size (device memory of the capture), so CUDA-GL
// interop on a buffer (cudaGraphicsGLRegisterBuffer, cudaGraphicsMapResources,
// cudaGraphicsResourceGetMappedPointer) maps the buffer's allocation; interop on textures/images stays GPU only.
#pragma once
#ifndef KSIM_GL_H
#define KSIM_GL_H
// the system headers' include guards: a later #include of the real header (the kernel-only entry) adds nothing
#define __gl_h_ 1
#define __GL_H__ 1
#define __glext_h_ 1
#define __gl_glext_h_ 1
#define __glu_h__ 1
#define __GLU_H__ 1
#define __GLUT_H__ 1
#define __FREEGLUT_H__ 1
#define __FREEGLUT_STD_H__ 1
#define __FREEGLUT_EXT_H__ 1
#define GLX_H 1
#define __CUDA_GL_INTEROP_H__ 1
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

typedef unsigned int GLenum;
typedef unsigned char GLboolean;
typedef unsigned int GLbitfield;
typedef void GLvoid;
typedef signed char GLbyte;
typedef short GLshort;
typedef int GLint;
typedef int GLsizei;
typedef unsigned char GLubyte;
typedef unsigned short GLushort;
typedef unsigned int GLuint;
typedef float GLfloat;
typedef float GLclampf;
typedef double GLdouble;
typedef double GLclampd;
typedef char GLchar;
typedef char GLcharARB;
typedef ptrdiff_t GLsizeiptr;
typedef ptrdiff_t GLintptr;
typedef ptrdiff_t GLsizeiptrARB;
typedef ptrdiff_t GLintptrARB;
typedef unsigned short GLhalf;
typedef long long GLint64;
typedef unsigned long long GLuint64;

#define GL_FALSE 0
#define GL_TRUE 1
#define GL_NO_ERROR 0
#define GL_NONE 0
#define GL_ZERO 0
#define GL_ONE 1
#define GL_POINTS 0x0000
#define GL_LINES 0x0001
#define GL_LINE_LOOP 0x0002
#define GL_LINE_STRIP 0x0003
#define GL_TRIANGLES 0x0004
#define GL_TRIANGLE_STRIP 0x0005
#define GL_TRIANGLE_FAN 0x0006
#define GL_QUADS 0x0007
#define GL_POLYGON 0x0009
#define GL_DEPTH_BUFFER_BIT 0x00000100
#define GL_STENCIL_BUFFER_BIT 0x00000400
#define GL_COLOR_BUFFER_BIT 0x00004000
#define GL_BYTE 0x1400
#define GL_UNSIGNED_BYTE 0x1401
#define GL_SHORT 0x1402
#define GL_UNSIGNED_SHORT 0x1403
#define GL_INT 0x1404
#define GL_UNSIGNED_INT 0x1405
#define GL_FLOAT 0x1406
#define GL_DOUBLE 0x140A
#define GL_HALF_FLOAT 0x140B
#define GL_RED 0x1903
#define GL_GREEN 0x1904
#define GL_BLUE 0x1905
#define GL_ALPHA 0x1906
#define GL_RGB 0x1907
#define GL_RGBA 0x1908
#define GL_LUMINANCE 0x1909
#define GL_LUMINANCE_ALPHA 0x190A
#define GL_BGR 0x80E0
#define GL_BGRA 0x80E1
#define GL_BGR_EXT 0x80E0
#define GL_BGRA_EXT 0x80E1
#define GL_RGB8 0x8051
#define GL_RGBA8 0x8058
#define GL_R32F 0x822E
#define GL_RGBA32F 0x8814
#define GL_RGBA32F_ARB 0x8814
#define GL_DEPTH_TEST 0x0B71
#define GL_LIGHTING 0x0B50
#define GL_LIGHT0 0x4000
#define GL_BLEND 0x0BE2
#define GL_CULL_FACE 0x0B44
#define GL_POINT_SMOOTH 0x0B10
#define GL_LINE_SMOOTH 0x0B20
#define GL_TEXTURE_1D 0x0DE0
#define GL_TEXTURE_2D 0x0DE1
#define GL_TEXTURE_3D 0x806F
#define GL_TEXTURE_RECTANGLE_ARB 0x84F5
#define GL_TEXTURE_MAG_FILTER 0x2800
#define GL_TEXTURE_MIN_FILTER 0x2801
#define GL_TEXTURE_WRAP_S 0x2802
#define GL_TEXTURE_WRAP_T 0x2803
#define GL_TEXTURE_WRAP_R 0x8072
#define GL_NEAREST 0x2600
#define GL_LINEAR 0x2601
#define GL_CLAMP 0x2900
#define GL_REPEAT 0x2901
#define GL_CLAMP_TO_EDGE 0x812F
#define GL_TEXTURE_ENV 0x2300
#define GL_TEXTURE_ENV_MODE 0x2200
#define GL_MODULATE 0x2100
#define GL_REPLACE 0x1E01
#define GL_DECAL 0x2101
#define GL_SRC_ALPHA 0x0302
#define GL_ONE_MINUS_SRC_ALPHA 0x0303
#define GL_MODELVIEW 0x1700
#define GL_PROJECTION 0x1701
#define GL_TEXTURE 0x1702
#define GL_SMOOTH 0x1D01
#define GL_FLAT 0x1D00
#define GL_FRONT 0x0404
#define GL_BACK 0x0405
#define GL_FRONT_AND_BACK 0x0408
#define GL_FILL 0x1B02
#define GL_LINE 0x1B01
#define GL_UNPACK_ALIGNMENT 0x0CF5
#define GL_PACK_ALIGNMENT 0x0D05
#define GL_VERTEX_ARRAY 0x8074
#define GL_NORMAL_ARRAY 0x8075
#define GL_COLOR_ARRAY 0x8076
#define GL_TEXTURE_COORD_ARRAY 0x8078
#define GL_VENDOR 0x1F00
#define GL_RENDERER 0x1F01
#define GL_VERSION 0x1F02
#define GL_EXTENSIONS 0x1F03
#define GL_ARRAY_BUFFER 0x8892
#define GL_ELEMENT_ARRAY_BUFFER 0x8893
#define GL_PIXEL_PACK_BUFFER 0x88EB
#define GL_PIXEL_UNPACK_BUFFER 0x88EC
#define GL_ARRAY_BUFFER_ARB 0x8892
#define GL_ELEMENT_ARRAY_BUFFER_ARB 0x8893
#define GL_PIXEL_PACK_BUFFER_ARB 0x88EB
#define GL_PIXEL_UNPACK_BUFFER_ARB 0x88EC
#define GL_STREAM_DRAW 0x88E0
#define GL_STREAM_READ 0x88E1
#define GL_STREAM_COPY 0x88E2
#define GL_STATIC_DRAW 0x88E4
#define GL_STATIC_READ 0x88E5
#define GL_STATIC_COPY 0x88E6
#define GL_DYNAMIC_DRAW 0x88E8
#define GL_DYNAMIC_READ 0x88E9
#define GL_DYNAMIC_COPY 0x88EA
#define GL_STREAM_DRAW_ARB 0x88E0
#define GL_STATIC_DRAW_ARB 0x88E4
#define GL_DYNAMIC_DRAW_ARB 0x88E8
#define GL_DYNAMIC_COPY_ARB 0x88EA
#define GL_READ_ONLY 0x88B8
#define GL_WRITE_ONLY 0x88B9
#define GL_READ_WRITE 0x88BA
#define GL_READ_ONLY_ARB 0x88B8
#define GL_WRITE_ONLY_ARB 0x88B9
#define GL_READ_WRITE_ARB 0x88BA

#define GLUT_RGB 0
#define GLUT_RGBA 0
#define GLUT_INDEX 1
#define GLUT_SINGLE 0
#define GLUT_DOUBLE 2
#define GLUT_ACCUM 4
#define GLUT_ALPHA 8
#define GLUT_DEPTH 16
#define GLUT_STENCIL 32
#define GLUT_MULTISAMPLE 128
#define GLUT_LEFT_BUTTON 0
#define GLUT_MIDDLE_BUTTON 1
#define GLUT_RIGHT_BUTTON 2
#define GLUT_DOWN 0
#define GLUT_UP 1
#define GLUT_LEFT 0
#define GLUT_ENTERED 1
#define GLUT_KEY_F1 1
#define GLUT_KEY_LEFT 100
#define GLUT_KEY_UP 101
#define GLUT_KEY_RIGHT 102
#define GLUT_KEY_DOWN 103
#define GLUT_KEY_PAGE_UP 104
#define GLUT_KEY_PAGE_DOWN 105
#define GLUT_KEY_HOME 106
#define GLUT_KEY_END 107
#define GLUT_ACTIVE_SHIFT 1
#define GLUT_ACTIVE_CTRL 2
#define GLUT_ACTIVE_ALT 4
#define GLUT_WINDOW_X 100
#define GLUT_WINDOW_Y 101
#define GLUT_WINDOW_WIDTH 102
#define GLUT_WINDOW_HEIGHT 103
#define GLUT_SCREEN_WIDTH 200
#define GLUT_SCREEN_HEIGHT 201
#define GLUT_ELAPSED_TIME 700
#define GLUT_ACTION_ON_WINDOW_CLOSE 0x01F9
#define GLUT_ACTION_EXIT 0
#define GLUT_ACTION_GLUTMAINLOOP_RETURNS 1
#define GLUT_ACTION_CONTINUE_EXECUTION 2
#define GLUT_CORE_PROFILE 0x0001
#define GLUT_COMPATIBILITY_PROFILE 0x0002
#define GLUT_DEBUG 0x0001
#define GLUT_FORWARD_COMPATIBLE 0x0002
#define GLUT_BITMAP_9_BY_15 ((void*)2)
#define GLUT_BITMAP_8_BY_13 ((void*)3)
#define GLUT_BITMAP_TIMES_ROMAN_10 ((void*)4)
#define GLUT_BITMAP_TIMES_ROMAN_24 ((void*)5)
#define GLUT_BITMAP_HELVETICA_10 ((void*)6)
#define GLUT_BITMAP_HELVETICA_12 ((void*)7)
#define GLUT_BITMAP_HELVETICA_18 ((void*)8)
#define GLUT_STROKE_ROMAN ((void*)0)
#define GLUT_STROKE_MONO_ROMAN ((void*)1)

// the ARB_vertex_buffer_object entry points a program fetches with glXGetProcAddress (CUDA by Example's gpu_anim.h)
typedef void (*PFNGLBINDBUFFERPROC)(GLenum, GLuint);
typedef void (*PFNGLDELETEBUFFERSPROC)(GLsizei, const GLuint*);
typedef void (*PFNGLGENBUFFERSPROC)(GLsizei, GLuint*);
typedef void (*PFNGLBUFFERDATAPROC)(GLenum, GLsizeiptr, const void*, GLenum);
typedef void (*PFNGLBUFFERSUBDATAPROC)(GLenum, GLintptr, GLsizeiptr, const void*);
typedef void* (*PFNGLMAPBUFFERPROC)(GLenum, GLenum);
typedef GLboolean (*PFNGLUNMAPBUFFERPROC)(GLenum);
typedef PFNGLBINDBUFFERPROC PFNGLBINDBUFFERARBPROC;
typedef PFNGLDELETEBUFFERSPROC PFNGLDELETEBUFFERSARBPROC;
typedef PFNGLGENBUFFERSPROC PFNGLGENBUFFERSARBPROC;
typedef PFNGLBUFFERDATAPROC PFNGLBUFFERDATAARBPROC;
typedef PFNGLBUFFERSUBDATAPROC PFNGLBUFFERSUBDATAARBPROC;
typedef PFNGLMAPBUFFERPROC PFNGLMAPBUFFERARBPROC;
typedef PFNGLUNMAPBUFFERPROC PFNGLUNMAPBUFFERARBPROC;

namespace ksim_gl {
struct Buffer { size_t n = 0; char* mem = nullptr; };
struct State {
  void (*display)() = nullptr;
  void (*idle)() = nullptr;
  void (*reshape)(int, int) = nullptr;
  void (*timer)(int) = nullptr;
  int timer_value = 0;
  bool redisplay = false, leave = false, in_loop = false;
  int width = 300, height = 300, windows = 0;
  GLuint next_buffer = 1;
  std::map<GLuint, Buffer> buffers;
  std::map<GLenum, GLuint> bound;
};
inline State& gl() { static State s; return s; }
// how many times glutMainLoop calls the idle callback (and the display callback after it where a redisplay was posted)
constexpr int IDLE_CALLS = 2;

inline void gen_buffers(GLsizei n, GLuint* ids) {
  for (GLsizei i = 0; i < n; i++) { ids[i] = gl().next_buffer++; gl().buffers[ids[i]]; }
}
inline void bind_buffer(GLenum target, GLuint id) {
  gl().bound[target] = id;
  if (id) gl().buffers[id];
}
inline void delete_buffers(GLsizei n, const GLuint* ids) {
  for (GLsizei i = 0; i < n; i++) {
    auto it = gl().buffers.find(ids[i]);
    if (it == gl().buffers.end()) continue;
    if (it->second.mem) ksim_host::free_alloc(it->second.mem);
    gl().buffers.erase(it);
  }
}
inline Buffer* bound_buffer(GLenum target) {
  auto b = gl().bound.find(target);
  if (b == gl().bound.end() || !b->second) return nullptr;
  return &gl().buffers[b->second];
}
// the buffer's store: an allocation of the capture's device memory (interop hands it to kernels)
inline void buffer_data(GLenum target, GLsizeiptr size, const void* data, GLenum) {
  Buffer* b = bound_buffer(target);
  if (!b) return;
  if (b->mem) ksim_host::free_alloc(b->mem);
  b->n = (size_t)size;
  b->mem = (char*)ksim_host::map_alloc(b->n, ksim_host::M_DEVICE, nullptr);
  if (b->mem && data) memcpy(b->mem, data, b->n);
}
inline void buffer_sub_data(GLenum target, GLintptr off, GLsizeiptr size, const void* data) {
  Buffer* b = bound_buffer(target);
  if (b && b->mem && data && (size_t)(off + size) <= b->n) memcpy(b->mem + off, data, (size_t)size);
}
inline void* map_buffer(GLenum target, GLenum) { Buffer* b = bound_buffer(target); return b ? b->mem : nullptr; }
inline GLboolean unmap_buffer(GLenum) { return GL_TRUE; }
inline void get_buffer_sub_data(GLenum target, GLintptr off, GLsizeiptr size, void* data) {
  Buffer* b = bound_buffer(target);
  if (b && b->mem && data && (size_t)(off + size) <= b->n) memcpy(data, b->mem + off, (size_t)size);
}

// glutMainLoop: the callbacks once or twice, then the end of the program
[[noreturn]] inline void main_loop(const char* file, int line) {
  State& S = gl();
  std::string called = S.display ? "the display callback once" : "";
  if (S.idle) called += std::string(called.empty() ? "" : " and ") + "the idle callback " + std::to_string(IDLE_CALLS) + " times";
  ksim_host::note("stubbed", "the program's GLUT window was not shown: the capture runs without a display "
                  "(glutMainLoop called " + (called.empty() ? std::string("no callback") : called) +
                  ", then ended the program with exit(0))", file, line);
  S.in_loop = true;
  if (S.reshape && !S.leave) S.reshape(S.width, S.height);
  if (S.display && !S.leave) { S.redisplay = false; S.display(); }
  for (int i = 0; i < IDLE_CALLS && !S.leave; i++) {
    if (S.timer) { void (*t)(int) = S.timer; S.timer = nullptr; t(S.timer_value); }
    if (S.idle && !S.leave) S.idle();
    if (S.display && S.redisplay && !S.leave) { S.redisplay = false; S.display(); }
  }
  exit(0);
}
inline int glut_get(GLenum what) {
  switch (what) {
    case GLUT_WINDOW_WIDTH: return gl().width;
    case GLUT_WINDOW_HEIGHT: return gl().height;
    case GLUT_SCREEN_WIDTH: return 1920;
    case GLUT_SCREEN_HEIGHT: return 1080;
    case GLUT_ELAPSED_TIME: return (int)((ksim_host::now_s() - ksim_host::st().t0) * 1000);
    default: return 0;
  }
}
}  // namespace ksim_gl

// GLUT
inline void glutInit(int*, char**) {}
inline void glutInitDisplayMode(unsigned) {}
inline void glutInitWindowSize(int w, int h) { ksim_gl::gl().width = w; ksim_gl::gl().height = h; }
inline void glutInitWindowPosition(int, int) {}
inline void glutInitContextVersion(int, int) {}
inline void glutInitContextProfile(int) {}
inline void glutInitContextFlags(int) {}
inline int glutCreateWindow(const char*) { return ++ksim_gl::gl().windows; }
inline void glutDestroyWindow(int) {}
inline int glutGetWindow() { return ksim_gl::gl().windows; }
inline void glutSetWindow(int) {}
inline void glutSetWindowTitle(const char*) {}
inline void glutReshapeWindow(int w, int h) { ksim_gl::gl().width = w; ksim_gl::gl().height = h; }
inline void glutPositionWindow(int, int) {}
inline void glutFullScreen() {}
inline void glutDisplayFunc(void (*f)()) { ksim_gl::gl().display = f; }
inline void glutIdleFunc(void (*f)()) { ksim_gl::gl().idle = f; }
inline void glutReshapeFunc(void (*f)(int, int)) { ksim_gl::gl().reshape = f; }
inline void glutTimerFunc(unsigned, void (*f)(int), int v) { ksim_gl::gl().timer = f; ksim_gl::gl().timer_value = v; }
inline void glutKeyboardFunc(void (*)(unsigned char, int, int)) {}
inline void glutKeyboardUpFunc(void (*)(unsigned char, int, int)) {}
inline void glutSpecialFunc(void (*)(int, int, int)) {}
inline void glutSpecialUpFunc(void (*)(int, int, int)) {}
inline void glutMouseFunc(void (*)(int, int, int, int)) {}
inline void glutMouseWheelFunc(void (*)(int, int, int, int)) {}
inline void glutMotionFunc(void (*)(int, int)) {}
inline void glutPassiveMotionFunc(void (*)(int, int)) {}
inline void glutEntryFunc(void (*)(int)) {}
inline void glutVisibilityFunc(void (*)(int)) {}
inline void glutCloseFunc(void (*)()) {}
inline void glutWMCloseFunc(void (*)()) {}
inline void glutPostRedisplay() { ksim_gl::gl().redisplay = true; }
inline void glutSwapBuffers() {}
inline void glutLeaveMainLoop() { ksim_gl::gl().leave = true; }
inline void glutMainLoopEvent() {}
inline void glutSetOption(GLenum, int) {}
inline int glutGet(GLenum what) { return ksim_gl::glut_get(what); }
inline int glutGetModifiers() { return 0; }
inline int glutCreateMenu(void (*)(int)) { return 1; }
inline void glutAddMenuEntry(const char*, int) {}
inline void glutAttachMenu(int) {}
inline void glutBitmapCharacter(void*, int) {}
inline void glutStrokeCharacter(void*, int) {}
inline int glutBitmapWidth(void*, int) { return 8; }
inline void glutSolidSphere(double, int, int) {}
inline void glutWireSphere(double, int, int) {}
inline void glutSolidCube(double) {}
inline void glutWireCube(double) {}
inline void glutSolidTeapot(double) {}
inline void glutWireTeapot(double) {}
#define glutMainLoop() ksim_gl::main_loop(__FILE__, __LINE__)

// OpenGL: drawing does nothing
#define KSIM_GL_NOP(name) template <class... A> inline void name(A...) {}
KSIM_GL_NOP(glClearColor) KSIM_GL_NOP(glClear) KSIM_GL_NOP(glClearDepth) KSIM_GL_NOP(glDrawPixels)
KSIM_GL_NOP(glFlush) KSIM_GL_NOP(glFinish) KSIM_GL_NOP(glViewport) KSIM_GL_NOP(glMatrixMode) KSIM_GL_NOP(glLoadIdentity)
KSIM_GL_NOP(glOrtho) KSIM_GL_NOP(glFrustum) KSIM_GL_NOP(glPushMatrix) KSIM_GL_NOP(glPopMatrix) KSIM_GL_NOP(glTranslatef)
KSIM_GL_NOP(glTranslated) KSIM_GL_NOP(glRotatef) KSIM_GL_NOP(glRotated) KSIM_GL_NOP(glScalef) KSIM_GL_NOP(glScaled)
KSIM_GL_NOP(glEnable) KSIM_GL_NOP(glDisable) KSIM_GL_NOP(glBlendFunc) KSIM_GL_NOP(glShadeModel) KSIM_GL_NOP(glPolygonMode)
KSIM_GL_NOP(glBegin) KSIM_GL_NOP(glEnd) KSIM_GL_NOP(glVertex2f) KSIM_GL_NOP(glVertex2i) KSIM_GL_NOP(glVertex2d)
KSIM_GL_NOP(glVertex3f) KSIM_GL_NOP(glVertex3d) KSIM_GL_NOP(glVertex3fv) KSIM_GL_NOP(glColor3f) KSIM_GL_NOP(glColor4f)
KSIM_GL_NOP(glColor3ub) KSIM_GL_NOP(glColor4ub) KSIM_GL_NOP(glColor3fv) KSIM_GL_NOP(glNormal3f) KSIM_GL_NOP(glTexCoord2f)
KSIM_GL_NOP(glTexCoord2i) KSIM_GL_NOP(glRasterPos2i) KSIM_GL_NOP(glRasterPos2f) KSIM_GL_NOP(glRasterPos3f)
KSIM_GL_NOP(glPixelStorei) KSIM_GL_NOP(glPixelZoom) KSIM_GL_NOP(glPointSize) KSIM_GL_NOP(glLineWidth)
KSIM_GL_NOP(glBindTexture) KSIM_GL_NOP(glDeleteTextures) KSIM_GL_NOP(glTexParameteri) KSIM_GL_NOP(glTexParameterf)
KSIM_GL_NOP(glTexEnvi) KSIM_GL_NOP(glTexEnvf) KSIM_GL_NOP(glTexImage2D) KSIM_GL_NOP(glTexSubImage2D)
KSIM_GL_NOP(glEnableClientState) KSIM_GL_NOP(glDisableClientState) KSIM_GL_NOP(glVertexPointer)
KSIM_GL_NOP(glColorPointer) KSIM_GL_NOP(glNormalPointer) KSIM_GL_NOP(glTexCoordPointer) KSIM_GL_NOP(glDrawArrays)
KSIM_GL_NOP(glDrawElements) KSIM_GL_NOP(glLightfv) KSIM_GL_NOP(glMaterialfv) KSIM_GL_NOP(glDepthFunc)
KSIM_GL_NOP(glDepthMask) KSIM_GL_NOP(glCullFace) KSIM_GL_NOP(glHint) KSIM_GL_NOP(glReadBuffer) KSIM_GL_NOP(glDrawBuffer)
KSIM_GL_NOP(gluOrtho2D) KSIM_GL_NOP(gluPerspective) KSIM_GL_NOP(gluLookAt)
#undef KSIM_GL_NOP
inline void glGenTextures(GLsizei n, GLuint* ids) { for (GLsizei i = 0; i < n; i++) ids[i] = (GLuint)(i + 1); }
inline void glReadPixels(GLint, GLint, GLsizei w, GLsizei h, GLenum, GLenum, void*) { (void)w; (void)h; }
inline GLenum glGetError() { return GL_NO_ERROR; }
inline const GLubyte* glGetString(GLenum) { return (const GLubyte*)"ksim headless OpenGL"; }
inline const GLubyte* gluErrorString(GLenum) { return (const GLubyte*)"no error"; }
inline void glGetIntegerv(GLenum, GLint* v) { if (v) *v = 0; }
inline void glGetFloatv(GLenum, GLfloat* v) { if (v) *v = 0; }
// buffer objects (OpenGL 1.5): declared where glext.h declares them (GL_GLEXT_PROTOTYPES); else a program fetches
// them with glXGetProcAddress into variables of its own
#ifdef GL_GLEXT_PROTOTYPES
inline void glGenBuffers(GLsizei n, GLuint* ids) { ksim_gl::gen_buffers(n, ids); }
inline void glBindBuffer(GLenum t, GLuint id) { ksim_gl::bind_buffer(t, id); }
inline void glDeleteBuffers(GLsizei n, const GLuint* ids) { ksim_gl::delete_buffers(n, ids); }
inline void glBufferData(GLenum t, GLsizeiptr n, const void* d, GLenum u) { ksim_gl::buffer_data(t, n, d, u); }
inline void glBufferSubData(GLenum t, GLintptr o, GLsizeiptr n, const void* d) { ksim_gl::buffer_sub_data(t, o, n, d); }
inline void glGetBufferSubData(GLenum t, GLintptr o, GLsizeiptr n, void* d) { ksim_gl::get_buffer_sub_data(t, o, n, d); }
inline void* glMapBuffer(GLenum t, GLenum a) { return ksim_gl::map_buffer(t, a); }
inline GLboolean glUnmapBuffer(GLenum t) { return ksim_gl::unmap_buffer(t); }
inline void glGenBuffersARB(GLsizei n, GLuint* ids) { ksim_gl::gen_buffers(n, ids); }
inline void glBindBufferARB(GLenum t, GLuint id) { ksim_gl::bind_buffer(t, id); }
inline void glDeleteBuffersARB(GLsizei n, const GLuint* ids) { ksim_gl::delete_buffers(n, ids); }
inline void glBufferDataARB(GLenum t, GLsizeiptr n, const void* d, GLenum u) { ksim_gl::buffer_data(t, n, d, u); }
inline void* glMapBufferARB(GLenum t, GLenum a) { return ksim_gl::map_buffer(t, a); }
inline GLboolean glUnmapBufferARB(GLenum t) { return ksim_gl::unmap_buffer(t); }
#endif
typedef void (*__GLXextFuncPtr)();
inline __GLXextFuncPtr glXGetProcAddress(const GLubyte* name) {
  static const std::map<std::string, __GLXextFuncPtr> fns = {
    {"glGenBuffers", (__GLXextFuncPtr)&ksim_gl::gen_buffers}, {"glGenBuffersARB", (__GLXextFuncPtr)&ksim_gl::gen_buffers},
    {"glBindBuffer", (__GLXextFuncPtr)&ksim_gl::bind_buffer}, {"glBindBufferARB", (__GLXextFuncPtr)&ksim_gl::bind_buffer},
    {"glDeleteBuffers", (__GLXextFuncPtr)&ksim_gl::delete_buffers},
    {"glDeleteBuffersARB", (__GLXextFuncPtr)&ksim_gl::delete_buffers},
    {"glBufferData", (__GLXextFuncPtr)&ksim_gl::buffer_data}, {"glBufferDataARB", (__GLXextFuncPtr)&ksim_gl::buffer_data},
    {"glBufferSubData", (__GLXextFuncPtr)&ksim_gl::buffer_sub_data},
    {"glBufferSubDataARB", (__GLXextFuncPtr)&ksim_gl::buffer_sub_data},
    {"glMapBuffer", (__GLXextFuncPtr)&ksim_gl::map_buffer}, {"glMapBufferARB", (__GLXextFuncPtr)&ksim_gl::map_buffer},
    {"glUnmapBuffer", (__GLXextFuncPtr)&ksim_gl::unmap_buffer},
    {"glUnmapBufferARB", (__GLXextFuncPtr)&ksim_gl::unmap_buffer},
  };
  auto it = fns.find((const char*)name);
  return it == fns.end() ? nullptr : it->second;
}
inline __GLXextFuncPtr glXGetProcAddressARB(const GLubyte* name) { return glXGetProcAddress(name); }

// CUDA-OpenGL interop on buffer objects: the buffer's allocation, mapped in place
struct cudaGraphicsResource { GLuint buffer; };
enum cudaGraphicsRegisterFlags { cudaGraphicsRegisterFlagsNone = 0, cudaGraphicsRegisterFlagsReadOnly = 1,
                                 cudaGraphicsRegisterFlagsWriteDiscard = 2, cudaGraphicsRegisterFlagsSurfaceLoadStore = 4,
                                 cudaGraphicsRegisterFlagsTextureGather = 8 };
enum cudaGraphicsMapFlags { cudaGraphicsMapFlagsNone = 0, cudaGraphicsMapFlagsReadOnly = 1,
                            cudaGraphicsMapFlagsWriteDiscard = 2 };
enum cudaGLDeviceList { cudaGLDeviceListAll = 1, cudaGLDeviceListCurrentFrame = 2, cudaGLDeviceListNextFrame = 3 };
#undef cudaGraphicsGLRegisterBuffer
#undef cudaGLSetGLDevice
inline cudaError_t cudaGLSetGLDevice(int d) { return cudaSetDevice(d); }
inline cudaError_t cudaGLGetDevices(unsigned* n, int* devs, unsigned cap, cudaGLDeviceList) {
  if (n) *n = 1;
  if (devs && cap) devs[0] = 0;
  return cudaSuccess;
}
inline cudaError_t cudaGraphicsGLRegisterBuffer(cudaGraphicsResource** r, GLuint buffer, unsigned) {
  auto it = ksim_gl::gl().buffers.find(buffer);
  if (!r || it == ksim_gl::gl().buffers.end() || !it->second.mem) return ksim_host::ret(cudaErrorInvalidValue);
  *r = new cudaGraphicsResource{buffer};
  return cudaSuccess;
}
inline cudaError_t cudaGraphicsUnregisterResource(cudaGraphicsResource* r) { delete r; return cudaSuccess; }
inline cudaError_t cudaGraphicsMapResources(int, cudaGraphicsResource**, cudaStream_t = 0) { return cudaSuccess; }
inline cudaError_t cudaGraphicsUnmapResources(int, cudaGraphicsResource**, cudaStream_t = 0) { return cudaSuccess; }
inline cudaError_t cudaGraphicsResourceSetMapFlags(cudaGraphicsResource*, unsigned) { return cudaSuccess; }
inline cudaError_t cudaGraphicsResourceGetMappedPointer(void** p, size_t* n, cudaGraphicsResource* r) {
  auto it = r ? ksim_gl::gl().buffers.find(r->buffer) : ksim_gl::gl().buffers.end();
  if (!p || it == ksim_gl::gl().buffers.end() || !it->second.mem) return ksim_host::ret(cudaErrorInvalidValue);
  *p = it->second.mem;
  if (n) *n = it->second.n;
  return cudaSuccess;
}
#define cudaGraphicsSubResourceGetMappedArray(...) KSIM_GPU_ONLY("OpenGL interop on textures (cudaGraphicsSubResourceGetMappedArray)")
#define cudaGraphicsResourceGetMappedMipmappedArray(...) KSIM_GPU_ONLY("OpenGL interop on textures (cudaGraphicsResourceGetMappedMipmappedArray)")
// the pre-CUDA 3 interop API
#define cudaGLRegisterBufferObject(...) KSIM_GPU_ONLY("OpenGL interop (cudaGLRegisterBufferObject)")
#define cudaGLMapBufferObject(...) KSIM_GPU_ONLY("OpenGL interop (cudaGLMapBufferObject)")
#define cudaGLUnmapBufferObject(...) cudaSuccess
#define cudaGLUnregisterBufferObject(...) cudaSuccess
#endif  // KSIM_GL_H
